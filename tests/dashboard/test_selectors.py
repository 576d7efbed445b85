"""The dashboard snapshot: what it shows, who may read it, and that it costs a fixed few queries."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.dashboard.events import NODE_ACTIONS_CAP
from apps.dashboard.selectors import dashboard_snapshot
from apps.tenants.selectors import Principal
from apps.tenants.services import quota_set
from tests.factories import ActionFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db

STAFF = Principal(tenant_ids=frozenset(), acting_tenant=None, is_staff=True)


def place(*, node, tenant, state="running", cpu=1.0, memory=16.0, **fields):
    now = timezone.now()
    return ActionFactory(
        tenant=tenant,
        node=node,
        state=state,
        allocation={"cpu": cpu, "memory": memory},
        assigned_at=now,
        started_at=now if state == "running" else None,
        **fields,
    )


def test_snapshot_shows_nodes_with_used_free_and_placed_actions():
    acme = TenantFactory(name="acme")
    node = NodeFactory(name="node-a", capacity={"cpu": 4, "memory": 8192})
    NodeFactory(name="node-b", capacity={"cpu": 2})
    running = place(node=node, tenant=acme, cpu=2, memory=1024)
    assigned = place(node=node, tenant=acme, state="assigned", type="sandbox.python")
    ActionFactory(tenant=acme)  # queued: counted, not placed
    ActionFactory(tenant=acme, state="succeeded", node=node, allocation={"cpu": 3})  # holds nothing

    snapshot = dashboard_snapshot(principal=STAFF)

    node_a, node_b = snapshot["nodes"]
    assert node_a["name"] == "node-a" and node_a["state"] == "online"
    assert node_a["used"] == {"cpu": 3.0, "memory": 1040.0}
    assert node_a["free"] == {"cpu": 1.0, "memory": 7152.0}
    assert node_a["actions_total"] == 2
    listed = {a["id"]: a for a in node_a["actions"]}
    assert listed[str(running.id)]["state"] == "running"
    assert listed[str(running.id)]["tenant"] == "acme"
    assert listed[str(running.id)]["started_at"] is not None
    assert listed[str(assigned.id)] | {"assigned_at": None} == {
        "id": str(assigned.id),
        "tenant": "acme",
        "type": "sandbox.python",
        "state": "assigned",
        "attempt": 1,
        "units": 1,
        "allocation": {"cpu": 1.0, "memory": 16.0},
        "gpus": [],
        "batch_id": "",
        "batch_size": 1,
        "assigned_at": None,
        "started_at": None,
    }
    assert node_b["used"] == {"cpu": 0.0} and node_b["free"] == {"cpu": 2.0}
    assert node_b["actions"] == [] and node_b["actions_total"] == 0


def test_snapshot_shows_tenant_queues_usage_and_quotas():
    acme = TenantFactory(name="acme")
    TenantFactory(name="idle")
    quota_set(tenant=acme, resource="cpu", guaranteed=2, limit=6)
    node = NodeFactory(capacity={"cpu": 8, "memory": 8192})
    place(node=node, tenant=acme, cpu=2)
    place(node=node, tenant=acme, state="assigned", cpu=1)
    for _ in range(3):
        ActionFactory(tenant=acme)

    snapshot = dashboard_snapshot(principal=STAFF)

    assert [t["name"] for t in snapshot["tenants"]] == ["acme", "idle"]
    acme_view, idle_view = snapshot["tenants"]
    assert acme_view == {
        "name": "acme",
        "queued": 3,
        "assigned": 1,
        "running": 1,
        "usage": {"cpu": 3.0, "memory": 32.0},
        "quotas": {"cpu": {"guaranteed": 2.0, "limit": 6.0, "lending_limit": None}},
        "waiting": acme_view["waiting"],
    }
    assert acme_view["waiting"].startswith("room is free now")
    assert idle_view == {
        "name": "idle",
        "queued": 0,
        "assigned": 0,
        "running": 0,
        "usage": {},
        "quotas": {},
        "waiting": None,
    }
    totals = snapshot["totals"]
    assert (totals["queued"], totals["assigned"], totals["running"]) == (3, 1, 1)
    assert totals["capacity"] == {"cpu": 8.0, "memory": 8192.0}
    assert totals["used"] == {"cpu": 3.0, "memory": 32.0}


def test_offline_nodes_are_listed_but_not_counted_as_capacity():
    NodeFactory(name="up", capacity={"cpu": 4})
    NodeFactory(name="down", capacity={"cpu": 16}, state="offline")

    totals = dashboard_snapshot(principal=STAFF)["totals"]

    assert (totals["nodes"], totals["nodes_online"]) == (2, 1)
    assert totals["capacity"] == {"cpu": 4.0}


def test_a_busy_node_lists_its_oldest_actions_up_to_the_cap_and_counts_all():
    tenant = TenantFactory()
    node = NodeFactory(capacity={"cpu": 1000, "memory": 10**6})
    for _ in range(NODE_ACTIONS_CAP + 10):
        place(node=node, tenant=tenant)

    (view,) = dashboard_snapshot(principal=STAFF)["nodes"]

    assert len(view["actions"]) == NODE_ACTIONS_CAP
    assert view["actions_total"] == NODE_ACTIONS_CAP + 10
    assert view["used"]["cpu"] == NODE_ACTIONS_CAP + 10


def _queries_for_snapshot() -> int:
    with CaptureQueriesContext(connection) as queries:
        dashboard_snapshot(principal=STAFF)
    return len(queries)


def test_query_count_does_not_grow_with_nodes_tenants_or_actions():
    tenant = TenantFactory()
    quota_set(tenant=tenant, resource="cpu", guaranteed=1, limit=100)
    node = NodeFactory(capacity={"cpu": 100, "memory": 10**6})
    place(node=node, tenant=tenant)
    ActionFactory(tenant=tenant)  # queued: its tenant's waiting reason is read too
    small = _queries_for_snapshot()

    for i in range(8):
        tenant = TenantFactory()
        quota_set(tenant=tenant, resource="cpu", guaranteed=1, limit=100)
        quota_set(tenant=tenant, resource="memory", guaranteed=1, limit=100)
        node = NodeFactory(capacity={"cpu": 100, "memory": 10**6})
        for _ in range(i + 3):
            place(node=node, tenant=tenant)
            place(node=node, tenant=tenant, state="assigned")
            ActionFactory(tenant=tenant)

    assert _queries_for_snapshot() == small


@pytest.mark.parametrize(
    "principal",
    [
        Principal(tenant_ids=frozenset({1}), acting_tenant=None),
        Principal(tenant_ids=frozenset(), acting_tenant=None),
    ],
    ids=["tenant member", "stranger"],
)
def test_only_staff_may_read_the_snapshot(principal):
    with pytest.raises(PermissionDenied):
        dashboard_snapshot(principal=principal)
