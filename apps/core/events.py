"""Everything this project sends over the channel layer, and the group names.

Sends happen after commit and never raise: Redis carries only what may be
lost, and the periodic scheduler tick and agents' heartbeats recover from a
lost message.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

DASHBOARD_GROUP = "dashboard"


def agent_group(node_id: str) -> str:
    return f"agent.{node_id}"


def action_group(action_id: str) -> str:
    return f"action.{action_id}"


def _send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # the channel layer is best effort by design
        logger.warning("channel layer send to %s failed", group, exc_info=True)


def agent_assign(node_id: str, assignments: list[dict[str, Any]]) -> None:
    """One message per node per round, which the consumer unpacks into ``assign`` frames."""
    _send(agent_group(node_id), {"type": "agent.assign", "assignments": assignments})


def agent_resize(node_id: str, resize: dict[str, Any]) -> None:
    """``resize`` is a protocol ``Resize`` less its type: the consumer adds it."""
    _send(agent_group(node_id), {"type": "agent.resize", "resize": resize})


def agent_cancel(node_id: str, action_id: str, attempt: int) -> None:
    _send(agent_group(node_id), {"type": "agent.cancel", "action": action_id, "attempt": attempt})


def action_finished(action_id: str) -> None:
    """Wakes long-polling ``GET /actions/{id}?wait=`` requests."""
    _send(action_group(action_id), {"type": "action.finished", "action": action_id})


def dashboard_changed() -> None:
    _send(DASHBOARD_GROUP, {"type": "dashboard.changed"})


def capacity_changed() -> None:
    """Work was added or capacity freed: run a scheduling round and refresh dashboards."""
    from apps.scheduling.wake import scheduler_wake

    scheduler_wake()
    dashboard_changed()
