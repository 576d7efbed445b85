"""Dashboard fixtures: staff, a tenant member, websocket clients through the real ASGI stack."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client

from apps.tenants import services as tenant_services
from tangram_web.asgi import application
from tests.factories import TenantFactory, UserFactory

#: How long a test waits for a frame it expects; generous, since waits end as soon as it comes.
FRAME_WAIT_S = 10.0


@pytest.fixture(autouse=True)
def private_channel_layer(settings):
    """A channel-layer prefix of this test's own, so parallel runs' broadcasts do not leak in."""
    layers = {name: dict(config) for name, config in django_settings.CHANNEL_LAYERS.items()}
    default = layers["default"]
    if default["BACKEND"] == "channels_redis.core.RedisChannelLayer":
        default["CONFIG"] = {**default["CONFIG"], "prefix": f"test-{uuid.uuid4().hex[:12]}"}
    settings.CHANNEL_LAYERS = layers


@pytest.fixture
def staff_user(db) -> User:
    return UserFactory(is_staff=True)


@pytest.fixture
def member_user(db) -> User:
    """A tenant's member without staff rights."""
    user = UserFactory()
    tenant_services.membership_add(tenant=TenantFactory(name="members-tenant"), user=user)
    return user


def session_headers(user: User | None) -> list[tuple[bytes, bytes]]:
    """Headers of a browser holding ``user``'s session cookie (none for an anonymous one)."""
    if user is None:
        return []
    client = Client()
    client.force_login(user)
    return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]


@pytest.fixture
def staff_session(staff_user) -> list[tuple[bytes, bytes]]:
    return session_headers(staff_user)


def dashboard_socket(headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
    """A websocket to ``ws/dashboard/`` through the project's ASGI app and its session auth."""
    return WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)


async def next_snapshot(
    communicator: WebsocketCommunicator,
    until: Callable[[dict[str, Any]], bool] = lambda s: True,
    timeout: float = FRAME_WAIT_S,
) -> dict[str, Any]:
    """The first snapshot for which ``until`` holds, skipping older ones."""
    async with asyncio.timeout(timeout):
        while True:
            frame = await communicator.receive_json_from(timeout=timeout)
            assert frame["type"] == "snapshot"
            if until(frame["snapshot"]):
                return frame["snapshot"]
