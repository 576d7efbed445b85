"""Shared fixtures: an owner tenant, a stranger tenant and staff, with API clients.

Also the hypothesis profiles: ``ci`` (the default) and ``deep``, chosen by
``TANGRAM_HYPOTHESIS``, for a long fuzz of the policy properties and random
workloads before a policy change lands.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from hypothesis import settings
from rest_framework.test import APIClient

from apps.tenants import services as tenant_services
from apps.tenants.models import Tenant
from tests.factories import NodeFactory, TenantFactory, UserFactory

settings.register_profile("ci", max_examples=150, deadline=None)
settings.register_profile("deep", max_examples=3000, deadline=None)
HYPOTHESIS_PROFILE = os.environ.get("TANGRAM_HYPOTHESIS", "ci")
settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A deep fuzz of one test may run past the suite's 300 s timeout on a busy
    machine; there it has none."""
    if HYPOTHESIS_PROFILE == "deep":
        for item in items:
            item.add_marker(pytest.mark.timeout(0))


@dataclass
class Caller:
    tenant: Tenant
    token: str
    client: APIClient


def _caller(name: str) -> Caller:
    tenant = TenantFactory(name=name)
    _, raw = tenant_services.token_issue(tenant=tenant, name="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return Caller(tenant=tenant, token=raw, client=client)


@pytest.fixture
def owner(db) -> Caller:
    return _caller("owner")


@pytest.fixture
def stranger(db) -> Caller:
    return _caller("stranger")


@pytest.fixture
def staff_client(db) -> APIClient:
    client = APIClient()
    client.force_login(UserFactory(is_staff=True))
    return client


@pytest.fixture
def node(db):
    return NodeFactory(name="node-a", capacity={"cpu": 4, "memory": 8192})
