"""Writes for actions: submit, cancel, started, result, requeue.

Every state transition is a conditional UPDATE (``filter(state=expected)``), so
two writers racing on one action cannot both win, and each transition writes
an ``ActionEvent``. Side effects run after commit.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, DateTimeField, F, Max, Min, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.actions.models import (
    PLACED_STATES,
    TERMINAL_STATES,
    Action,
    ActionBatchStat,
    ActionDurationStat,
    ActionEvent,
    ActionState,
    TrajectoryPositionStat,
)
from apps.core import events
from apps.core.exceptions import ApplicationError, ConflictError
from apps.inventory import selectors as inventory_selectors
from apps.tenants.models import Tenant
from apps.tenants.selectors import quota_list
from tangram_agent.protocol import RESULT_STATES, Result, scorer_warm_key
from tangram_policy.estimate import (
    batch_update,
    observed_work,
    stat_update,
    trajectory_update,
    type_priors,
    work_at_min_units,
)
from tangram_policy.types import BatchStat, DurationStat, Elasticity, TrajectoryStat

logger = logging.getLogger(__name__)


def _check_fits(*, tenant: Tenant, specs: Sequence[dict[str, Any]], bulk: bool) -> None:
    """Refuse demand that no node could ever hold or that is beyond the tenant's limit."""
    limits = {q.resource: q.limit for q in quota_list(tenant=tenant)}
    largest = inventory_selectors.node_largest_capacity()
    for index, spec in enumerate(specs):
        prefix = f"{index}." if bulk else ""
        # None: no node offers this type yet; the action waits for one to register.
        capacity = largest.get(spec["type"])
        for kind, amount in spec["demand"].items():
            if kind in limits and amount > limits[kind]:
                raise ApplicationError(
                    f"demand.{kind}={amount:g} is beyond tenant {tenant.name}'s limit of "
                    f"{limits[kind]:g}.",
                    field=f"{prefix}demand.{kind}",
                )
            if capacity is not None and amount > capacity.get(kind, 0.0):
                raise ApplicationError(
                    f"demand.{kind}={amount:g} is beyond every node that runs {spec['type']} "
                    f"(largest: {capacity.get(kind, 0.0):g}).",
                    field=f"{prefix}demand.{kind}",
                )


def _with_scorer_affinity(*, tenant: Tenant, spec: dict[str, Any]) -> dict[str, Any]:
    """A ``reward.python`` spec with its scorer's warm key added to its affinity.

    Agents report the key while they keep that scorer resident, so the policy
    sends its next calls where it is loaded instead of loading it again.
    """
    if spec["type"] != "reward.python":
        return spec
    payload = spec["payload"]
    key = scorer_warm_key(str(tenant.pk), payload["code"], payload.get("files", {}))
    return {**spec, "affinity": list(dict.fromkeys([*spec.get("affinity", []), key]))}


@transaction.atomic
def actions_submit(*, tenant: Tenant, specs: Sequence[dict[str, Any]], bulk: bool) -> list[Action]:
    _check_fits(tenant=tenant, specs=specs, bulk=bulk)
    now = timezone.now()
    actions = [
        Action(
            id=uuid.uuid4(),
            tenant=tenant,
            submitted_at=now,
            position=position,
            **_with_scorer_affinity(tenant=tenant, spec=spec),
        )
        for spec, position in zip(specs, _positions(tenant=tenant, specs=specs), strict=True)
    ]
    Action.objects.bulk_create(actions)
    ActionEvent.objects.bulk_create(
        ActionEvent(action=a, state=ActionState.QUEUED, attempt=1, at=a.submitted_at)
        for a in actions
    )
    transaction.on_commit(events.capacity_changed)
    return actions


def _positions(*, tenant: Tenant, specs: Sequence[dict[str, Any]]) -> list[int | None]:
    """Each spec's position in its trajectory: the actions the trajectory (by tenant,
    job and name) submitted before it, these specs' earlier ones included; None for
    a spec that names no trajectory. A trajectory submits one action at a time, so
    two submits racing for one trajectory are not guarded against."""
    named = {(spec.get("job", ""), spec["trajectory"]) for spec in specs if spec.get("trajectory")}
    if not named:
        return [None] * len(specs)
    submitted = Counter(
        {
            (job, trajectory): count
            for job, trajectory, count in Action.objects.filter(
                tenant=tenant,
                job__in={job for job, _ in named},
                trajectory__in={trajectory for _, trajectory in named},
            )
            .values("job", "trajectory")
            .annotate(count=Count("id"))
            .values_list("job", "trajectory", "count")
            if (job, trajectory) in named
        }
    )
    positions: list[int | None] = []
    for spec in specs:
        if not spec.get("trajectory"):
            positions.append(None)
            continue
        key = (spec.get("job", ""), spec["trajectory"])
        positions.append(submitted[key])
        submitted[key] += 1
    return positions


@transaction.atomic
def trajectories_fold_ended(*, idle_s: float | None = None, limit: int = 500) -> int:
    """Fold the trajectories that have gone quiet into their jobs'
    ``TrajectoryPositionStat``, and return how many were folded.

    A trajectory has ended, as far as the server can tell, once none of its
    actions is queued or placed and none has finished for ``idle_s`` (longer
    than a model thinks between two calls; ``TANGRAM_TRAJECTORY_IDLE_S``). Only
    ended ones count: one under way has passed its early positions and not yet
    run its later ones. One that goes on after all is folded again when it goes
    quiet again: its new actions count, and its earlier ones get the new runs
    after them (``estimate.trajectory_update``).
    """
    idle = settings.TANGRAM_TRAJECTORY_IDLE_S if idle_s is None else idle_s
    quiet_since = timezone.now() - timedelta(seconds=idle)
    ended = list(
        Action.objects.filter(position__isnull=False, trajectory_counted=False)
        .values("tenant_id", "job", "trajectory")
        .annotate(last=Max("finished_at"), open=Count("id", filter=~Q(state__in=TERMINAL_STATES)))
        .filter(open=0, last__lt=quiet_since)
        .values_list("tenant_id", "job", "trajectory")[:limit]
    )
    if not ended:
        return 0
    wanted = set(ended)
    trajectories = {trajectory for _, _, trajectory in ended}
    rows = [
        row
        for row in Action.objects.select_for_update(skip_locked=True)
        .filter(
            trajectory__in=trajectories,
            position__isnull=False,
            trajectory_counted=False,
            state__in=TERMINAL_STATES,
        )
        .values_list(
            "id",
            "tenant_id",
            "job",
            "trajectory",
            "position",
            "type",
            "started_at",
            "finished_at",
            "elasticity",
            "units",
        )
        if (row[1], row[2], row[3]) in wanted
    ]
    runs: dict[tuple[Any, str, str], list[tuple[int, str, float]]] = {}
    for _, tenant_id, job, trajectory, position, type_, started, finished, elastic, units in rows:
        # Nothing for one that never ran (cancelled).
        work = (
            _run_at_min_units(elastic, started, finished, units)
            if started is not None and finished is not None
            else 0.0
        )
        runs.setdefault((tenant_id, job, trajectory), []).append((position, type_, work))
    # A trajectory whose new runs start past its first went on after it was folded:
    # each of its actions folded before gets the new runs after it.
    went_on = Q()
    for (tenant_id, job, trajectory), ran in runs.items():
        if min(position for position, _, _ in ran) > 0:
            went_on |= Q(tenant_id=tenant_id, job=job, trajectory=trajectory)
    counted: dict[tuple[Any, str, str], list[tuple[int, str]]] = {}
    if went_on:
        for tenant_id, job, trajectory, position, type_ in Action.objects.filter(
            went_on, position__isnull=False, trajectory_counted=True
        ).values_list("tenant_id", "job", "trajectory", "position", "type"):
            counted.setdefault((tenant_id, job, trajectory), []).append((position, type_))
    # What this fold adds, per job: the rows below get these sums added.
    added: dict[tuple[Any, str], TrajectoryStat] = {}
    for (tenant_id, job, trajectory), ran in runs.items():
        added[(tenant_id, job)] = trajectory_update(
            added.get((tenant_id, job)), ran, counted.get((tenant_id, job, trajectory), ())
        )
    for (tenant_id, job), stat_added in sorted(added.items()):
        for (position, type_), (count, rest_s) in sorted(stat_added.after.items()):
            stat, _ = TrajectoryPositionStat.objects.select_for_update().get_or_create(
                tenant_id=tenant_id, job=job, position=position, type=type_
            )
            stat.count += count
            stat.rest_s += rest_s
            stat.save(update_fields=["count", "rest_s"])
    Action.objects.filter(pk__in=[row[0] for row in rows]).update(trajectory_counted=True)
    return len({(row[1], row[2], row[3]) for row in rows})


@transaction.atomic
def action_cancel(*, action: Action) -> Action:
    now = timezone.now()
    changed = Action.objects.filter(
        pk=action.pk, state__in=[ActionState.QUEUED, *PLACED_STATES]
    ).update(state=ActionState.CANCELLED, finished_at=now, error="cancelled by the client")
    if not changed:
        action.refresh_from_db()
        raise ConflictError(f"Action {action.pk} is already {action.state}.", field="state")
    ActionEvent.objects.create(
        action=action, state=ActionState.CANCELLED, attempt=action.attempt, node=action.node, at=now
    )
    if action.node_id is not None and action.state in PLACED_STATES:
        node_id, attempt = action.node_id, action.attempt
        transaction.on_commit(lambda: events.agent_cancel(node_id, str(action.pk), attempt))
    transaction.on_commit(lambda: events.action_finished(str(action.pk)))
    transaction.on_commit(events.capacity_changed)
    action.refresh_from_db()
    return action


def _from_unix(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


@transaction.atomic
def action_mark_started(
    *, node_id: uuid.UUID, action_id: str, attempt: int, started_at: float
) -> bool:
    at = _from_unix(started_at) or timezone.now()
    changed = Action.objects.filter(
        pk=action_id, attempt=attempt, node_id=node_id, state=ActionState.ASSIGNED
    ).update(state=ActionState.RUNNING, started_at=at)
    if changed:
        ActionEvent.objects.create(
            action_id=action_id, state=ActionState.RUNNING, attempt=attempt, node_id=node_id, at=at
        )
        transaction.on_commit(events.dashboard_changed)
    return bool(changed)


def _cap(text: str, truncated: bool) -> tuple[str, bool]:
    cap = settings.TANGRAM_OUTPUT_CAP_BYTES
    data = text.encode(errors="replace")
    if len(data) <= cap:
        return text, truncated
    return data[:cap].decode(errors="ignore"), True


@transaction.atomic
def action_record_result(*, node_id: uuid.UUID, result: Result) -> bool:
    """Record a result once: a duplicate or a stale attempt's result changes nothing."""
    if result["state"] not in RESULT_STATES:
        raise ApplicationError(f"Unknown result state {result['state']!r}.", field="state")
    finished_at = _from_unix(result["finished_at"]) or timezone.now()
    stdout, stdout_truncated = _cap(result["stdout"], result["stdout_truncated"])
    stderr, stderr_truncated = _cap(result["stderr"], result["stderr_truncated"])
    # A result can overtake its "started" message: keep started_at, else take the agent's.
    started = _from_unix(result.get("started_at"))
    changed = Action.objects.filter(
        pk=result["action"],
        attempt=result["attempt"],
        node_id=node_id,
        state__in=PLACED_STATES,
    ).update(
        state=result["state"],
        exit_code=result["exit_code"],
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=stdout_truncated,
        stderr_truncated=stderr_truncated,
        error=result.get("error", "")[:10_000],
        finished_at=finished_at,
        started_at=Coalesce(F("started_at"), Value(started, output_field=DateTimeField())),
    )
    if not changed:
        return False
    ActionEvent.objects.create(
        action_id=result["action"],
        state=result["state"],
        attempt=result["attempt"],
        node_id=node_id,
        at=finished_at,
    )
    if result["state"] == ActionState.SUCCEEDED:
        _observe_duration(action_id=result["action"])
    action_id = result["action"]
    transaction.on_commit(lambda: events.action_finished(action_id))
    transaction.on_commit(events.capacity_changed)
    return True


def _run_at_min_units(
    elasticity: dict[str, Any], started: datetime, finished: datetime, units: int
) -> float:
    """How long a run from ``started`` to ``finished`` on ``units`` would have taken at
    its minimum units: estimates are kept so, whatever parallelism a run was given."""
    return work_at_min_units(
        Elasticity(**elasticity) if elasticity else Elasticity(),
        max((finished - started).total_seconds(), 0.0),
        units,
    )


def _observe_duration(*, action_id: str) -> None:
    tenant_id, action_type, started, finished, elasticity, units, batch_id, members = (
        Action.objects.values_list(
            "tenant_id",
            "type",
            "started_at",
            "finished_at",
            "elasticity",
            "units",
            "batch_id",
            "batch_size",
        ).get(pk=action_id)
    )
    if started is None or finished is None:
        return
    if batch_id:
        _observe_batch(
            tenant_id=tenant_id, action_type=action_type, batch_id=batch_id, members=members
        )
        return
    observed = _run_at_min_units(elasticity, started, finished, units)
    row, _ = ActionDurationStat.objects.select_for_update().get_or_create(
        tenant_id=tenant_id, type=action_type
    )
    stat = stat_update(DurationStat(row.count, row.mean_s) if row.count else None, observed)
    row.count, row.mean_s = stat.count, stat.mean_s
    row.save(update_fields=["count", "mean_s"])


def _observe_batch(*, tenant_id: Any, action_type: str, batch_id: str, members: int) -> None:
    """Once the last of a batch's members has succeeded, fold what the batch cost into
    its ``ActionBatchStat``: how long it ran, first start to last end, against one
    member's expected run. Its members' own durations are the batch's (a scorer
    runs them in one pass), not one run's, so they leave the duration estimate be.
    The stat's row lock orders the members' results: only the last sees them all.
    """
    row, _ = ActionBatchStat.objects.select_for_update().get_or_create(
        tenant_id=tenant_id, type=action_type
    )
    batch = Action.objects.filter(batch_id=batch_id, state=ActionState.SUCCEEDED).aggregate(
        done=Count("id"), first=Min("started_at"), last=Max("finished_at")
    )
    if batch["done"] < members or batch["first"] is None:
        return
    durations = {
        (str(tenant), action_type): DurationStat(count, mean_s)
        for tenant, count, mean_s in ActionDurationStat.objects.filter(
            type=action_type, count__gt=0
        ).values_list("tenant_id", "count", "mean_s")
    }
    single_s = observed_work(str(tenant_id), action_type, durations, type_priors(durations))
    if single_s is None:  # no run of the type seen alone yet: nothing to measure against
        return
    stat = batch_update(
        BatchStat(row.count, row.marginal) if row.count else None,
        max((batch["last"] - batch["first"]).total_seconds(), 0.0),
        members,
        single_s,
    )
    row.count, row.marginal = stat.count, stat.marginal
    row.save(update_fields=["count", "marginal"])


def actions_requeue(*, actions: QuerySet[Action], reason: str) -> int:
    """Return placed actions to the queue with a new attempt; give up after the maximum.

    Called inside the caller's transaction (a lease reaper, a node re-registering).
    """
    now = timezone.now()
    placed = actions.filter(state__in=PLACED_STATES)
    rows = list(placed.values_list("id", "attempt", "node_id"))
    if not rows:
        return 0
    max_attempts = settings.TANGRAM_MAX_ATTEMPTS
    give_up = [r for r in rows if r[1] >= max_attempts]
    retry = [r for r in rows if r[1] < max_attempts]
    if give_up:
        Action.objects.filter(pk__in=[r[0] for r in give_up], state__in=PLACED_STATES).update(
            state=ActionState.FAILED,
            finished_at=now,
            error=f"gave up after {max_attempts} attempts; last: {reason}",
        )
    if retry:
        Action.objects.filter(pk__in=[r[0] for r in retry], state__in=PLACED_STATES).update(
            state=ActionState.QUEUED,
            node=None,
            allocation={},
            units=1,
            resized_at=None,
            done_at_resize_s=0.0,
            gpus=[],
            batch_id="",
            batch_size=1,
            attempt=F("attempt") + 1,
            assigned_at=None,
            started_at=None,
        )
    ActionEvent.objects.bulk_create(
        [
            ActionEvent(
                action_id=r[0],
                state=ActionState.FAILED,
                attempt=r[1],
                node_id=r[2],
                at=now,
                detail=reason[:500],
            )
            for r in give_up
        ]
        + [
            ActionEvent(
                action_id=r[0],
                state=ActionState.QUEUED,
                attempt=r[1] + 1,
                node_id=r[2],
                at=now,
                detail=reason[:500],
            )
            for r in retry
        ]
    )
    logger.warning("requeued %d and failed %d actions: %s", len(retry), len(give_up), reason)
    for action_id, *_ in give_up:
        transaction.on_commit(lambda a=str(action_id): events.action_finished(a))
    transaction.on_commit(events.capacity_changed)
    return len(rows)
