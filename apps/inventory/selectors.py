"""Reads for nodes and agent credentials."""

from __future__ import annotations

from typing import Any

from apps.actions.selectors import placed_usage
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


def node_list_with_usage() -> list[dict[str, Any]]:
    nodes = list(Node.objects.order_by("name"))
    placed = placed_usage(node_ids=[n.id for n in nodes])
    out = []
    for node in nodes:
        used = placed.by_node.get(node.id, {})
        out.append(
            {
                "node": node,
                "used": used,
                "free": placed.free_on(node.id, node.capacity),
                "actions": placed.actions_by_node.get(node.id, 0),
            }
        )
    return out
