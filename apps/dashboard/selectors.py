"""The dashboard's read: one snapshot of nodes, placed actions and tenant queues.

A fixed handful of queries whatever the pool's size: placed actions are read
once for both node and tenant usage, per-node listings are capped in SQL with
a window function, queue lengths come from one grouped count, and each
tenant's next queued action (one window query) says why it waits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from apps.actions.models import PLACED_STATES, Action, ActionState
from apps.actions.selectors import add_resources, placed_usage
from apps.dashboard.events import (
    NODE_ACTIONS_CAP,
    NodeView,
    PlacedActionView,
    QuotaView,
    Snapshot,
    TenantView,
    Totals,
)
from apps.inventory.models import Node
from apps.scheduling.selectors import queue_heads_waiting
from apps.tenants.models import Quota, Tenant
from apps.tenants.selectors import Principal


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _placed_listing() -> dict[Any, list[PlacedActionView]]:
    """The first NODE_ACTIONS_CAP placed actions of each node."""
    ranked = (
        Action.objects.filter(state__in=PLACED_STATES, node__isnull=False)
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("node_id")],
                order_by=[F("assigned_at").asc(nulls_last=True), F("id").asc()],
            )
        )
        .filter(rank__lte=NODE_ACTIONS_CAP)
        .values(
            "id",
            "node_id",
            "tenant__name",
            "type",
            "state",
            "attempt",
            "units",
            "allocation",
            "gpus",
            "batch_id",
            "batch_size",
            "assigned_at",
            "started_at",
        )
        .order_by("node_id", "rank")
    )
    listing: dict[Any, list[PlacedActionView]] = {}
    for row in ranked:
        listing.setdefault(row["node_id"], []).append(
            {
                "id": str(row["id"]),
                "tenant": row["tenant__name"],
                "type": row["type"],
                "state": row["state"],
                "attempt": row["attempt"],
                "units": row["units"],
                "allocation": {k: float(v) for k, v in row["allocation"].items()},
                "gpus": [str(gpu) for gpu in row["gpus"]],
                "batch_id": row["batch_id"],
                "batch_size": row["batch_size"],
                "assigned_at": _iso(row["assigned_at"]),
                "started_at": _iso(row["started_at"]),
            }
        )
    return listing


def _state_counts() -> dict[Any, dict[str, int]]:
    """Per tenant id, how many of its actions are queued, assigned and running."""
    counts: dict[Any, dict[str, int]] = {}
    rows = (
        Action.objects.filter(state__in=[ActionState.QUEUED, *PLACED_STATES])
        .values("tenant_id", "state")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "state", "n")
        .order_by()
    )
    for tenant_id, state, n in rows:
        counts.setdefault(tenant_id, {})[state] = n
    return counts


def _quotas() -> dict[Any, dict[str, QuotaView]]:
    quotas: dict[Any, dict[str, QuotaView]] = {}
    rows = Quota.objects.order_by("resource").values_list(
        "tenant_id", "resource", "guaranteed", "limit", "lending_limit"
    )
    for tenant_id, resource, guaranteed, limit, lending_limit in rows:
        quotas.setdefault(tenant_id, {})[resource] = {
            "guaranteed": guaranteed,
            "limit": limit,
            "lending_limit": lending_limit,
        }
    return quotas


def dashboard_snapshot(*, principal: Principal) -> Snapshot:
    """Everything the operator dashboard shows, as JSON-able data; staff only."""
    if not principal.is_staff:
        raise PermissionDenied("The dashboard is for staff.")
    placed = placed_usage()
    used_by_node, used_by_tenant = placed.by_node, placed.by_tenant
    listing = _placed_listing()
    state_counts = _state_counts()
    quotas = _quotas()
    waiting = queue_heads_waiting(placed=placed)

    nodes: list[NodeView] = []
    totals: Totals = {
        "nodes": 0,
        "nodes_online": 0,
        "capacity": {},
        "used": {},
        "queued": 0,
        "assigned": 0,
        "running": 0,
    }
    for node in Node.objects.order_by("name"):
        capacity = {kind: float(amount) for kind, amount in node.capacity.items()}
        used = used_by_node.get(node.id, {})
        nodes.append(
            {
                "id": str(node.id),
                "name": node.name,
                "state": node.state,  # type: ignore[typeddict-item]
                "last_seen_at": node.last_seen_at.isoformat(),
                "capacity": capacity,
                "used": {kind: used.get(kind, 0.0) for kind in capacity} | used,
                "free": placed.free_on(node.id, capacity),
                "warm": list(node.warm),
                "warm_slots": node.warm_slots,
                "actions": listing.get(node.id, []),
                "actions_total": placed.actions_by_node.get(node.id, 0),
            }
        )
        totals["nodes"] += 1
        if node.state == Node.State.ONLINE:
            totals["nodes_online"] += 1
            add_resources(totals["capacity"], capacity)
            add_resources(totals["used"], used)

    tenants: list[TenantView] = []
    for tenant in Tenant.objects.order_by("name").only("id", "name"):
        counts = state_counts.get(tenant.id, {})
        view: TenantView = {
            "name": tenant.name,
            "queued": counts.get("queued", 0),
            "assigned": counts.get("assigned", 0),
            "running": counts.get("running", 0),
            "usage": used_by_tenant.get(tenant.id, {}),
            "quotas": quotas.get(tenant.id, {}),
            "waiting": waiting.get(tenant.id),
        }
        tenants.append(view)
    totals["queued"] = sum(t["queued"] for t in tenants)
    totals["assigned"] = sum(t["assigned"] for t in tenants)
    totals["running"] = sum(t["running"] for t in tenants)

    return {
        "server_time": timezone.now().isoformat(),
        "nodes": nodes,
        "tenants": tenants,
        "totals": totals,
    }
