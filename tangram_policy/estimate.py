"""Duration estimates and the speedup model, shared by the policy and its callers.

The policy stays stateless: what it learns lives in ``DurationStat`` values that
the caller (live scheduler or simulator) keeps per (tenant, action type) and
updates with ``stat_update`` as actions finish. Durations are kept at the
action's minimum units (``work_at_min_units`` undoes an elastic speedup), so an
estimate does not depend on how many units earlier runs happened to get.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from tangram_policy.types import (
    BatchStat,
    DurationStat,
    Elasticity,
    PendingAction,
    TrajectoryStat,
)

#: Seconds assumed for an action type never seen before and without a hint.
COLD_START_PRIOR_S = 10.0
#: Weight of the prior, in observations, while few actions have finished.
PRIOR_WEIGHT = 2.0
#: Shortest run a batch's cost is measured against.
MIN_RUN_S = 1e-3
#: The marginal assumed of a batch type none of whose batches has been measured
#: yet. Not 0 (batching is free): a judge that reasons at length gains little from
#: batching, and a first wave of 32 such calls ran 17 times one call (bench.unseen).
BATCH_MARGINAL_PRIOR = 0.25
#: EWMA factor once ``stat_update`` has seen more than ``1 / EWMA_ALPHA`` actions.
EWMA_ALPHA = 0.05
#: Seconds over which ``decayed_mean`` averages a type's load: several RL steps'
#: worth of short calls, so that the gap between two steps does not erase it.
LOAD_WINDOW_S = 300.0


def speedup(elasticity: Elasticity, units: int) -> float:
    """Amdahl's speedup of ``units`` over ``elasticity.min_units``."""
    base = max(elasticity.min_units, 1)
    if units <= base:
        return 1.0
    p = min(max(elasticity.parallel_fraction, 0.0), 1.0)
    return 1.0 / ((1.0 - p) + p * base / units)


def duration_at(elasticity: Elasticity, base_s: float, units: int) -> float:
    """Expected run time on ``units`` of an action that takes ``base_s`` at its minimum."""
    return base_s / speedup(elasticity, units)


def work_at_min_units(elasticity: Elasticity, observed_s: float, units: int) -> float:
    """The run time a finished action would have taken at its minimum units."""
    return observed_s * speedup(elasticity, units)


def stat_update(stat: DurationStat | None, observed_s: float) -> DurationStat:
    """Running mean for the first observations, then an EWMA that follows drift."""
    if stat is None:
        return DurationStat(count=1, mean_s=observed_s)
    alpha = max(1.0 / (stat.count + 1), EWMA_ALPHA)
    return DurationStat(
        count=stat.count + 1, mean_s=stat.mean_s + alpha * (observed_s - stat.mean_s)
    )


def decayed_mean(mean: float, held: float, elapsed_s: float) -> float:
    """An exponential average in time: ``mean`` moved towards ``held``, held for
    the last ``elapsed_s`` seconds, with time constant ``LOAD_WINDOW_S``."""
    if elapsed_s <= 0:
        return mean
    return mean + (1.0 - math.exp(-elapsed_s / LOAD_WINDOW_S)) * (held - mean)


def batch_update(
    stat: BatchStat | None, batch_s: float, members: int, single_s: float
) -> BatchStat:
    """Fold in a batch of ``members`` that ran ``batch_s`` where one alone runs
    ``single_s``: each member past the first cost ``(batch_s / single_s - 1) /
    (members - 1)`` of a run, at most one (a batch no faster than its members one
    after another). Averaged as ``stat_update`` averages durations."""
    ratio = batch_s / max(single_s, MIN_RUN_S)
    observed = min(max(ratio - 1.0, 0.0) / (members - 1), 1.0)
    if stat is None:
        return BatchStat(count=1, marginal=observed)
    alpha = max(1.0 / (stat.count + 1), EWMA_ALPHA)
    return BatchStat(
        count=stat.count + 1, marginal=stat.marginal + alpha * (observed - stat.marginal)
    )


def expected_marginal(stat: BatchStat | None) -> float:
    """The observed marginal, blended with ``BATCH_MARGINAL_PRIOR`` weighing
    ``PRIOR_WEIGHT`` batches; the prior alone before any batch was measured."""
    if stat is None:
        return BATCH_MARGINAL_PRIOR
    prior = BATCH_MARGINAL_PRIOR * PRIOR_WEIGHT
    return (stat.marginal * stat.count + prior) / (stat.count + PRIOR_WEIGHT)


def type_priors(stats: Mapping[tuple[str, str], DurationStat]) -> dict[str, float]:
    """Per action type, the count-weighted mean over tenants: the prior for a new tenant."""
    sums: dict[str, tuple[float, float]] = {}
    for (_, action_type), stat in stats.items():
        total, count = sums.get(action_type, (0.0, 0.0))
        sums[action_type] = (total + stat.mean_s * stat.count, count + stat.count)
    return {t: total / count for t, (total, count) in sums.items() if count > 0}


def expected_duration(
    action: PendingAction,
    stats: Mapping[tuple[str, str], DurationStat],
    priors: Mapping[str, float],
) -> float:
    """Seconds at minimum units: the client's hint, else observations blended with a prior."""
    if action.duration_hint_s is not None and action.duration_hint_s >= 0:
        return action.duration_hint_s
    return expected_work(action.tenant, action.type, stats, priors)


def observed_work(
    tenant: str,
    action_type: str,
    stats: Mapping[tuple[str, str], DurationStat],
    priors: Mapping[str, float],
) -> float | None:
    """Seconds at minimum units observed for (tenant, type), else for the type across
    tenants; None before any has finished (no prior: a batch's cost is measured
    against a run that was seen)."""
    stat = stats.get((tenant, action_type))
    if stat is not None and stat.count > 0:
        return stat.mean_s
    return priors.get(action_type)


def expected_work(
    tenant: str,
    action_type: str,
    stats: Mapping[tuple[str, str], DurationStat],
    priors: Mapping[str, float],
) -> float:
    """Seconds at minimum units learned for (tenant, type), blended with the type's prior."""
    prior = priors.get(action_type, COLD_START_PRIOR_S)
    stat = stats.get((tenant, action_type))
    if stat is None or stat.count <= 0:
        return prior
    return (stat.mean_s * stat.count + prior * PRIOR_WEIGHT) / (stat.count + PRIOR_WEIGHT)


def trajectory_update(
    stat: TrajectoryStat | None,
    runs: Iterable[tuple[int, str, float]],
    counted: Iterable[tuple[int, str]] = (),
) -> TrajectoryStat:
    """Fold in a trajectory that has ended: ``runs`` are (position, type, seconds at
    minimum units) of its actions. Only ended trajectories count: one under way
    has passed its early positions and not yet run its later ones. One that goes
    on after all is folded again when it ends again, with the (position, type)
    of its actions folded before as ``counted``: each of those gets the new runs
    after it. Plain sums: a trajectory's shape is its job's, and does not drift
    as a type's run time can."""
    after = dict(stat.after) if stat is not None else {}
    ordered = sorted(runs)
    later = 0.0
    for position, action_type, observed_s in reversed(ordered):
        count, total = after.get((position, action_type), (0, 0.0))
        after[(position, action_type)] = (count + 1, total + later)
        later += observed_s
    for position, action_type in counted:
        new_s = sum(run_s for later_at, _, run_s in ordered if later_at > position)
        count, total = after.get((position, action_type), (0, 0.0))
        after[(position, action_type)] = (count, total + new_s)
    return trajectory_stat(after)


def trajectory_stat(after: Mapping[tuple[int, str], tuple[int, float]]) -> TrajectoryStat:
    """The stat of what a job's trajectories ran after each (position, type), with
    its sums over every type at each position."""
    at: dict[int, tuple[int, float]] = {}
    for (position, _), (count, rest_s) in after.items():
        was_count, was_rest_s = at.get(position, (0, 0.0))
        at[position] = (was_count + count, was_rest_s + rest_s)
    return TrajectoryStat(after, at)


def learned_rest(stat: TrajectoryStat, position: int, action_type: str) -> float:
    """What a trajectory of ``stat``'s job had left, on average, after its action of
    ``action_type`` at ``position`` (of any type where none had that one there);
    0 where none got that far."""
    count, rest_s = stat.after.get((position, action_type), (0, 0.0))
    if not count:
        count, rest_s = stat.at.get(position, (0, 0.0))
    return rest_s / count if count else 0.0
