"""The dashboard websocket: who may watch, and that it follows the database as it changes.

Through the project's real ASGI stack (session auth, routing) and the real
Redis channel layer; changes go through the real services, whose after-commit
hooks send ``dashboard.changed``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from apps.actions.services import action_mark_started, action_record_result, actions_submit
from apps.core.events import DASHBOARD_GROUP
from apps.dashboard.consumers import DashboardConsumer
from apps.dashboard.events import CLOSE_FORBIDDEN
from apps.scheduling.services import schedule_round
from tests.dashboard.conftest import FRAME_WAIT_S, dashboard_socket, next_snapshot, session_headers
from tests.factories import ActionFactory, NodeFactory, TenantFactory, succeeded_result

pytestmark = pytest.mark.django_db(transaction=True)

SLEEP = {"type": "sleep", "payload": {"seconds": 60}, "demand": {"cpu": 1, "memory": 16}}


def spec() -> dict:
    return {**SLEEP, "timeout_s": 120}


def tenant_view(snapshot: dict, name: str) -> dict:
    return next(t for t in snapshot["tenants"] if t["name"] == name)


def node_view(snapshot: dict, name: str) -> dict:
    return next(n for n in snapshot["nodes"] if n["name"] == name)


@pytest.fixture
def only_on_change(monkeypatch):
    """No periodic refresh within a test's time, so every snapshot after the first is caused."""
    monkeypatch.setattr(DashboardConsumer, "refresh_s", 600.0)
    monkeypatch.setattr(DashboardConsumer, "min_interval_s", 0.05)


@pytest.mark.parametrize("who", ["anonymous", "member"])
def test_anyone_but_staff_is_closed_with_4403_and_sent_nothing(who, member_user):
    headers = session_headers(None if who == "anonymous" else member_user)

    async def scenario():
        socket = dashboard_socket(headers)
        connected, _ = await socket.connect()
        assert connected
        closed = await socket.receive_output(timeout=FRAME_WAIT_S)
        assert closed == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}
        # Not in the group: a broadcast reaches no one.
        await get_channel_layer().group_send(DASHBOARD_GROUP, {"type": "dashboard.changed"})
        assert await socket.receive_nothing(timeout=0.3)

    asyncio.run(scenario())


def test_staff_get_a_snapshot_on_connect(staff_session):
    TenantFactory(name="acme")
    NodeFactory(name="node-a", capacity={"cpu": 4, "memory": 8192})

    async def scenario():
        socket = dashboard_socket(staff_session)
        connected, _ = await socket.connect()
        assert connected
        snapshot = await next_snapshot(socket)
        await socket.disconnect()
        return snapshot

    snapshot = asyncio.run(scenario())

    assert node_view(snapshot, "node-a")["free"] == {"cpu": 4.0, "memory": 8192.0}
    assert tenant_view(snapshot, "acme")["queued"] == 0


def test_snapshots_follow_an_action_from_queue_to_node_to_done(staff_session, only_on_change):
    acme = TenantFactory(name="acme")
    node = NodeFactory(name="node-a", capacity={"cpu": 4, "memory": 8192}, executors=["sleep"])

    async def scenario():
        socket = dashboard_socket(staff_session)
        await socket.connect()
        await next_snapshot(socket)

        (action,) = await database_sync_to_async(actions_submit)(
            tenant=acme, specs=[spec()], bulk=False
        )
        snapshot = await next_snapshot(socket, lambda s: tenant_view(s, "acme")["queued"] == 1)
        assert node_view(snapshot, "node-a")["actions"] == []

        await database_sync_to_async(schedule_round)()
        snapshot = await next_snapshot(socket, lambda s: node_view(s, "node-a")["actions"])
        (placed,) = node_view(snapshot, "node-a")["actions"]
        assert (placed["id"], placed["state"]) == (str(action.id), "assigned")
        assert placed["tenant"] == "acme"
        assert node_view(snapshot, "node-a")["used"]["cpu"] == 1.0
        assert tenant_view(snapshot, "acme")["queued"] == 0

        await database_sync_to_async(action_mark_started)(
            node_id=node.id, action_id=str(action.id), attempt=1, started_at=time.time()
        )
        snapshot = await next_snapshot(socket, lambda s: tenant_view(s, "acme")["running"] == 1)
        assert node_view(snapshot, "node-a")["actions"][0]["state"] == "running"

        await database_sync_to_async(action_record_result)(
            node_id=node.id,
            result=succeeded_result(action.id, 1, started_at=None, finished_at=time.time()),
        )
        snapshot = await next_snapshot(socket, lambda s: not node_view(s, "node-a")["actions"])
        assert node_view(snapshot, "node-a")["used"]["cpu"] == 0.0
        assert tenant_view(snapshot, "acme")["running"] == 0
        await socket.disconnect()

    asyncio.run(scenario())


def test_a_burst_of_changes_is_coalesced_and_the_last_always_arrives(staff_session, monkeypatch):
    monkeypatch.setattr(DashboardConsumer, "refresh_s", 600.0)
    monkeypatch.setattr(DashboardConsumer, "min_interval_s", 1.0)
    acme = TenantFactory(name="acme")
    burst = 20

    async def scenario():
        socket = dashboard_socket(staff_session)
        await socket.connect()
        await next_snapshot(socket)
        layer = get_channel_layer()
        for _ in range(burst):
            await database_sync_to_async(ActionFactory)(tenant=acme)
            await layer.group_send(DASHBOARD_GROUP, {"type": "dashboard.changed"})
        seen = 0

        def counted(snapshot):
            nonlocal seen
            seen += 1
            return tenant_view(snapshot, "acme")["queued"] == burst

        await next_snapshot(socket, counted)
        await socket.disconnect()
        return seen

    assert asyncio.run(scenario()) < burst / 2


def test_a_lost_message_is_made_good_by_the_periodic_refresh(staff_session, monkeypatch):
    monkeypatch.setattr(DashboardConsumer, "refresh_s", 0.2)
    acme = TenantFactory(name="acme")

    async def scenario():
        socket = dashboard_socket(staff_session)
        await socket.connect()
        await next_snapshot(socket)
        # Written without any after-commit broadcast, as if Redis had dropped it.
        await database_sync_to_async(ActionFactory)(tenant=acme)
        snapshot = await next_snapshot(socket, lambda s: tenant_view(s, "acme")["queued"] == 1)
        await socket.disconnect()
        return snapshot

    assert tenant_view(asyncio.run(scenario()), "acme")["queued"] == 1
