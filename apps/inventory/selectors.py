"""Reads for nodes and agent credentials."""

from __future__ import annotations

from typing import Any

from django.db.models import Count

from apps.actions.models import PLACED_STATES, Action
from apps.actions.selectors import add_resources
from apps.inventory.models import AgentToken, Node
from apps.tenants.services import token_digest


def agent_token_authenticate(*, raw: str) -> AgentToken | None:
    return AgentToken.objects.filter(digest=token_digest(raw), revoked_at__isnull=True).first()


def node_largest_capacity() -> dict[str, dict[str, float]]:
    """Per executor type, the largest amount of each kind on any one online node."""
    largest: dict[str, dict[str, float]] = {}
    for capacity, executors in Node.objects.filter(state=Node.State.ONLINE).values_list(
        "capacity", "executors"
    ):
        for executor in executors:
            best = largest.setdefault(executor, {})
            for kind, amount in capacity.items():
                best[kind] = max(best.get(kind, 0.0), float(amount))
    return largest


def node_used(*, node_ids: list[Any] | None = None) -> dict[Any, dict[str, float]]:
    """Resources held by assigned and running actions, per node id."""
    placed = Action.objects.filter(state__in=PLACED_STATES, node__isnull=False)
    if node_ids is not None:
        placed = placed.filter(node_id__in=node_ids)
    used: dict[Any, dict[str, float]] = {}
    for node_id, allocation in placed.values_list("node_id", "allocation"):
        add_resources(used.setdefault(node_id, {}), allocation)
    return used


def node_list_with_usage() -> list[dict[str, Any]]:
    nodes = list(Node.objects.order_by("name"))
    used = node_used(node_ids=[n.id for n in nodes])
    running = dict(
        Action.objects.filter(state__in=PLACED_STATES, node__in=nodes)
        .values("node_id")
        .annotate(n=Count("id"))
        .values_list("node_id", "n")
    )
    out = []
    for node in nodes:
        node_used_ = used.get(node.id, {})
        out.append(
            {
                "node": node,
                "used": node_used_,
                "free": {
                    kind: cap - node_used_.get(kind, 0.0) for kind, cap in node.capacity.items()
                },
                "actions": running.get(node.id, 0),
            }
        )
    return out
