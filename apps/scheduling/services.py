"""The scheduling round: snapshot, pure policy, one transaction of placements."""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.actions.models import (
    PLACED_STATES,
    Action,
    ActionEvent,
    ActionLoadStat,
    ActionState,
)
from apps.actions.services import trajectories_fold_ended
from apps.core import events
from apps.inventory.models import WarmKeyUse
from apps.inventory.services import (
    ASSIGNMENT_FIELDS,
    RESIZE_FIELDS,
    assignment_of,
    nodes_reap_lost,
    resize_of,
)
from apps.scheduling.selectors import scheduling_snapshot, work_done_s
from tangram_policy.registry import get_policy
from tangram_policy.types import EPSILON, Elasticity, PendingAction, Placement, Resize, Snapshot

logger = logging.getLogger(__name__)

#: Key of the Postgres advisory lock that makes one round run at a time.
ROUND_LOCK_KEY = 0x7A6E6772616D
#: A type's mean held below this, with nothing held or queued, is forgotten.
LOAD_FORGOTTEN = 1e-3
#: Placements written per UPDATE statement (7 parameters each: SQLite takes 32,766).
WRITE_CHUNK = 1000
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
    _resize(decision.resizes, now)
    assigned = _assign(decision.placements, now)
    _note_warm_keys_used(snapshot.pending, {str(a.pk) for a in assigned}, now)
    _note_type_loads(snapshot)
    if assigned:
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
        placed=len(assigned),
        policy_ms=policy_ms,
        total_ms=(time.perf_counter() - started) * 1000,
    )
    if assigned:
        logger.info(
            "round placed %d of %d queued (policy %.1f ms, round %.1f ms)",
            report.placed,
            report.pending,
            report.policy_ms,
            report.total_ms,
        )
    return report


def _note_warm_keys_used(pending: Sequence[PendingAction], placed: set[str], now: datetime) -> None:
    """Stamp the warm keys of the actions this round placed as used now."""
    keys = {key for action in pending if action.id in placed for key in action.affinity}
    if keys:
        WarmKeyUse.objects.bulk_create(
            [WarmKeyUse(key=key, used_at=now) for key in sorted(keys)],
            update_conflicts=True,
            unique_fields=["key"],
            update_fields=["used_at"],
        )


def _note_type_loads(snapshot: Snapshot) -> None:
    """Keep what each type held at this round's snapshot and its mean held then,
    for the next round to average from; forget a type that holds and asks nothing
    and held next to nothing lately."""
    seen_at = datetime.fromtimestamp(snapshot.now, tz=UTC)
    kept, gone = [], []
    for (tenant_id, type_), load in snapshot.type_loads.items():
        if load.held <= EPSILON and load.queued <= EPSILON and load.mean_held < LOAD_FORGOTTEN:
            gone.append((tenant_id, type_))
            continue
        kept.append(
            ActionLoadStat(
                tenant_id=tenant_id,
                type=type_,
                job=load.job,
                kind=load.kind,
                demand=dict(load.demand),
                held=load.held,
                mean_held=load.mean_held,
                updated_at=seen_at,
            )
        )
    if kept:
        ActionLoadStat.objects.bulk_create(
            kept,
            update_conflicts=True,
            unique_fields=["tenant", "type"],
            update_fields=["job", "kind", "demand", "held", "mean_held", "updated_at"],
        )
    if gone:
        ActionLoadStat.objects.filter(
            reduce(operator.or_, (Q(tenant_id=tenant_id, type=type_) for tenant_id, type_ in gone))
        ).delete()


def _resize(resizes: Sequence[Resize], now: datetime) -> None:
    """Change running elastic actions' cores: take some back before the placements
    that use them, or give more while the pool is idle. Or their GPUs: take some
    back from a run that may give them up (``Resize.gpus``, the ones it keeps).

    Conditional on the action still being placed on that node: one that ended
    since the snapshot freed its room anyway. Its agent sets the run's CPU
    limit when this commits; until then the placements made with the room are
    not sent either (the same commit), so a core is never promised twice for long.
    The work done so far is kept, since the pace changes from here.
    """
    if not resizes:
        return
    wanted = {resize.action_id: resize for resize in resizes}
    changed = []
    for action in Action.objects.filter(pk__in=list(wanted), state__in=PLACED_STATES).only(
        *RESIZE_FIELDS, "node_id", "elasticity", "started_at", "resized_at", "done_at_resize_s"
    ):
        resize = wanted[str(action.pk)]
        if str(action.node_id) != resize.node_id:
            continue
        if action.started_at is not None:
            action.done_at_resize_s = work_done_s(
                Elasticity(**action.elasticity),
                action.units,
                action.started_at,
                action.resized_at,
                action.done_at_resize_s,
                now,
            )
            action.resized_at = now
        action.allocation = dict(resize.allocation)
        action.units = resize.units
        if resize.gpus:
            action.gpus = list(resize.gpus)
        changed.append(action)
        message = resize_of(action)
        transaction.on_commit(
            lambda n=resize.node_id, m=message: events.agent_resize(n, m)  # type: ignore[misc]
        )
    Action.objects.bulk_update(
        changed,
        ["allocation", "units", "gpus", "resized_at", "done_at_resize_s"],
        batch_size=WRITE_CHUNK,
    )
    if changed:
        transaction.on_commit(events.dashboard_changed)
    logger.info("round resized %d running elastic action(s)", len(changed))


def _assign(placements: Sequence[Placement], now: datetime) -> list[Action]:
    """Write a decision's placements; return the actions assigned, in the policy's order.

    One ``UPDATE ... FROM (VALUES ...)`` per chunk (PostgreSQL and SQLite
    >= 3.33 both take it): a round can place thousands, and a statement each
    took seconds. The update is conditional on the action still being
    queued, so one cancelled since the snapshot keeps its state; what was
    assigned is read back by this round's ``assigned_at`` (rounds never overlap).
    """
    meta = Action._meta
    table = connection.ops.quote_name(meta.db_table)
    id_field = meta.get_field("id")
    node_field = meta.get_field("node").target_field  # type: ignore[union-attr]
    allocation_field = meta.get_field("allocation")
    gpus_field = meta.get_field("gpus")

    def prepared(field: Any, value: Any) -> Any:
        return field.get_db_prep_value(value, connection)

    when = prepared(meta.get_field("assigned_at"), now)
    batch_sizes = Counter(p.batch_id for p in placements if p.batch_id)
    # A queued action holds no GPUs and no batch (a requeue clears them): most
    # placements write only where, what and how many units, in the cheaper statement.
    plain = [p for p in placements if not p.gpus and not p.batch_id]
    rich_placements = [p for p in placements if p.gpus or p.batch_id]

    def row(p: Placement, rich: bool) -> list[Any]:
        values = [
            prepared(id_field, p.action_id),
            prepared(node_field, p.node_id),
            prepared(allocation_field, dict(p.allocation)),
            p.units,
        ]
        if rich:
            batch = p.batch_id or ""
            values += [prepared(gpus_field, list(p.gpus)), batch, batch_sizes[batch] or 1]
        return values

    with connection.cursor() as cursor:
        for rich, chosen in ((False, plain), (True, rich_placements)):
            extra = ", gpus = v.column5, batch_id = v.column6, batch_size = v.column7"
            row_sql = "(%s, %s, %s, %s, %s, %s, %s)" if rich else "(%s, %s, %s, %s)"
            for start in range(0, len(chosen), WRITE_CHUNK):
                chunk = chosen[start : start + WRITE_CHUNK]
                cursor.execute(
                    f"UPDATE {table} SET state = %s, node_id = v.column2, allocation = v.column3,"
                    f" units = v.column4{extra if rich else ''}, assigned_at = %s"
                    f" FROM (VALUES {', '.join([row_sql] * len(chunk))}) AS v"
                    f" WHERE {table}.id = v.column1 AND {table}.state = %s",
                    [
                        ActionState.ASSIGNED.value,
                        when,
                        *(value for p in chunk for value in row(p, rich)),
                        ActionState.QUEUED.value,
                    ],
                )
    order = {p.action_id: position for position, p in enumerate(placements)}
    assigned = Action.objects.filter(
        pk__in=list(order), state=ActionState.ASSIGNED, assigned_at=now
    ).only(*ASSIGNMENT_FIELDS)
    return sorted(assigned, key=lambda a: order[str(a.id)])


def scheduler_tick() -> RoundReport:
    """The periodic safety net: expire lost leases, learn from the trajectories
    that have ended, then run a round."""
    nodes_reap_lost()
    trajectories_fold_ended()
    return schedule_round()
