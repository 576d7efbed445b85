"""Duration estimates: hint first, then observations blended with a prior."""

from __future__ import annotations

import math

import pytest

from tangram_policy.estimate import (
    COLD_START_PRIOR_S,
    LOAD_WINDOW_S,
    batch_update,
    decayed_mean,
    duration_at,
    expected_duration,
    expected_marginal,
    learned_rest,
    observed_work,
    speedup,
    stat_update,
    trajectory_update,
    type_priors,
    work_at_min_units,
)
from tangram_policy.types import (
    BatchStat,
    DurationStat,
    Elasticity,
    PendingAction,
)


def _action(**kwargs: object) -> PendingAction:
    fields: dict[str, object] = {
        "id": "a",
        "tenant": "t",
        "type": "x",
        "demand": {"cpu": 1},
        "submitted_at": 0.0,
    }
    fields.update(kwargs)
    return PendingAction(**fields)  # type: ignore[arg-type]


def test_the_hint_wins_over_observations() -> None:
    stats = {("t", "x"): DurationStat(100, 50.0)}
    assert expected_duration(_action(duration_hint_s=3.0), stats, {}) == 3.0


def test_cold_start_uses_the_prior_then_the_type_mean_of_other_tenants() -> None:
    assert expected_duration(_action(), {}, {}) == COLD_START_PRIOR_S
    stats = {("other", "x"): DurationStat(10, 4.0)}
    assert expected_duration(_action(), stats, type_priors(stats)) == 4.0


def test_observations_outweigh_the_prior_as_they_accumulate() -> None:
    few = expected_duration(_action(), {("t", "x"): DurationStat(1, 100.0)}, {})
    many = expected_duration(_action(), {("t", "x"): DurationStat(1000, 100.0)}, {})
    assert COLD_START_PRIOR_S < few < many < 100.0
    assert many == pytest.approx(100.0, rel=0.01)


def test_stat_update_is_a_mean_then_an_ewma() -> None:
    stat = None
    for value in (2.0, 4.0, 6.0):
        stat = stat_update(stat, value)
    assert stat is not None and stat.count == 3 and stat.mean_s == pytest.approx(4.0)
    for _ in range(200):
        stat = stat_update(stat, 10.0)
    assert stat.mean_s == pytest.approx(10.0, abs=0.01)


def test_amdahl_speedup_and_its_inverse() -> None:
    elastic = Elasticity(min_units=1, max_units=8, parallel_fraction=0.9)
    assert speedup(elastic, 1) == 1.0
    assert speedup(elastic, 4) == pytest.approx(1 / (0.1 + 0.9 / 4))
    assert duration_at(elastic, 10.0, 4) == pytest.approx(10.0 * (0.1 + 0.9 / 4))
    assert work_at_min_units(elastic, duration_at(elastic, 10.0, 4), 4) == pytest.approx(10.0)
    assert speedup(Elasticity(), 8) == 1.0


def test_a_batch_costs_what_it_ran_beyond_one_member_per_extra_member() -> None:
    # Four members in 2.6 s where one alone runs 2 s: each extra member cost 0.1 of a run.
    first = batch_update(None, 2.6, 4, 2.0)
    assert first == BatchStat(count=1, marginal=pytest.approx(0.1))
    # One after another (8 s) or slower is a marginal of 1 at most; then a mean of the two.
    assert batch_update(None, 20.0, 4, 2.0).marginal == 1.0
    assert batch_update(first, 8.0, 4, 2.0).marginal == pytest.approx(0.55)
    # No faster than its slowest member alone: a marginal of 0, not below.
    assert batch_update(None, 1.0, 4, 2.0).marginal == 0.0


def test_one_batch_does_not_settle_the_marginal() -> None:
    """Blended with a prior of 0.25 worth two batches; the prior alone before any."""
    assert expected_marginal(None) == 0.25
    assert expected_marginal(BatchStat(count=1, marginal=0.9)) == pytest.approx(1.4 / 3)
    assert expected_marginal(BatchStat(count=1, marginal=0.0)) == pytest.approx(0.5 / 3)
    assert expected_marginal(BatchStat(count=98, marginal=0.9)) == pytest.approx(0.887)


def test_a_batch_is_measured_against_runs_seen_alone() -> None:
    stats = {("a", "score"): DurationStat(3, 2.0), ("b", "score"): DurationStat(1, 4.0)}
    priors = type_priors(stats)
    assert observed_work("a", "score", stats, priors) == 2.0
    assert observed_work("c", "score", stats, priors) == pytest.approx(2.5)  # other tenants'
    assert observed_work("a", "judge", stats, priors) is None  # never seen: no prior


def test_a_types_mean_load_moves_towards_what_it_held_over_the_window() -> None:
    assert decayed_mean(4.0, 10.0, 0.0) == 4.0
    assert decayed_mean(0.0, 10.0, LOAD_WINDOW_S) == pytest.approx(10.0 * (1 - math.exp(-1)))
    # Two halves of a stretch at one load average as the whole stretch does.
    half = decayed_mean(decayed_mean(4.0, 0.0, 50.0), 0.0, 50.0)
    assert half == pytest.approx(decayed_mean(4.0, 0.0, 100.0))


def test_what_a_trajectory_has_left_is_learned_by_its_action_s_position_and_type() -> None:
    """Two ended trajectories: an edit, a 25 s test and a 63 s hidden test, and an
    edit, a 5 s test and a reward. After the edits they had 88 s and 6 s left;
    after position 2, 0 s (the hidden test and the reward both ended theirs). A
    type not seen at a position takes that position's average over types. A
    trajectory that goes on after a pause adds its later runs after its
    earlier actions."""
    stat = trajectory_update(None, [(0, "edit", 3.0), (1, "test", 25.0), (2, "hidden", 63.0)])
    stat = trajectory_update(stat, [(0, "edit", 3.0), (1, "test", 5.0), (2, "reward", 1.0)])
    assert stat.after[(0, "edit")] == (2, 94.0)
    assert stat.at == {0: (2, 94.0), 1: (2, 64.0), 2: (2, 0.0)}
    assert learned_rest(stat, 0, "edit") == 47.0
    assert learned_rest(stat, 1, "test") == 32.0
    assert learned_rest(stat, 2, "reward") == 0.0
    assert learned_rest(stat, 1, "lint") == 32.0  # unseen at 1: the position's average
    assert learned_rest(stat, 3, "edit") == 0.0  # none got that far
    # The second goes on with a 10 s edit at position 3.
    folded = [(0, "edit"), (1, "test"), (2, "reward")]
    resumed = trajectory_update(stat, [(3, "edit", 10.0)], counted=folded)
    assert resumed.after[(0, "edit")] == (2, 104.0)
    assert resumed.after[(2, "reward")] == (1, 10.0)
    assert resumed.after[(2, "hidden")] == (1, 0.0)  # the other trajectory's
    assert resumed.at == {0: (2, 104.0), 1: (2, 74.0), 2: (2, 10.0), 3: (1, 0.0)}
