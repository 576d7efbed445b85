"""The scheduling round: snapshot, pure policy, one transaction of placements."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.actions.models import Action, ActionEvent, ActionState
from apps.core import events
from apps.inventory.services import assignment_of, nodes_reap_lost
from apps.scheduling.selectors import scheduling_snapshot
from tangram_policy.registry import get_policy

logger = logging.getLogger(__name__)

#: Key of the Postgres advisory lock that makes one round run at a time.
ROUND_LOCK_KEY = 0x7A6E6772616D
#: SQLite (embedded mode, one process) has no advisory locks; a process lock stands in.
_local_round_lock = threading.Lock()


@dataclass(frozen=True)
class RoundReport:
    pending: int
    placed: int
    policy_ms: float
    total_ms: float


def _take_round_lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROUND_LOCK_KEY])


def schedule_round() -> RoundReport:
    """Place queued actions; concurrent callers run one after another, never together."""
    if connection.vendor == "postgresql":
        return _schedule_round()
    with _local_round_lock:
        return _schedule_round()


@transaction.atomic
def _schedule_round() -> RoundReport:
    started = time.perf_counter()
    _take_round_lock()
    snapshot = scheduling_snapshot()
    policy_started = time.perf_counter()
    decision = get_policy(settings.TANGRAM_POLICY).decide(snapshot)
    policy_ms = (time.perf_counter() - policy_started) * 1000
    now = timezone.now()
    placed: list[str] = []
    for placement in decision.placements:
        changed = Action.objects.filter(pk=placement.action_id, state=ActionState.QUEUED).update(
            state=ActionState.ASSIGNED,
            node_id=placement.node_id,
            allocation=dict(placement.allocation),
            units=placement.units,
            assigned_at=now,
        )
        if changed:
            placed.append(placement.action_id)
    if placed:
        assigned = list(Action.objects.filter(pk__in=placed))
        ActionEvent.objects.bulk_create(
            ActionEvent(
                action=a, state=ActionState.ASSIGNED, attempt=a.attempt, node_id=a.node_id, at=now
            )
            for a in assigned
        )
        by_node: dict[str, list[Any]] = defaultdict(list)
        for action in assigned:
            by_node[str(action.node_id)].append(assignment_of(action))
        for node_id, assignments in by_node.items():
            transaction.on_commit(
                lambda n=node_id, a=assignments: events.agent_assign(n, a)  # type: ignore[misc]
            )
        transaction.on_commit(events.dashboard_changed)
    report = RoundReport(
        pending=len(snapshot.pending),
        placed=len(placed),
        policy_ms=policy_ms,
        total_ms=(time.perf_counter() - started) * 1000,
    )
    if placed:
        logger.info(
            "round placed %d of %d queued (policy %.1f ms, round %.1f ms)",
            report.placed,
            report.pending,
            report.policy_ms,
            report.total_ms,
        )
    return report


def scheduler_tick() -> RoundReport:
    """The periodic safety net: expire lost leases, then run a round."""
    nodes_reap_lost()
    return schedule_round()
