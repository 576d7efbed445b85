"""Duration estimates: hint first, then observations blended with a prior."""

from __future__ import annotations

import pytest

from tangram_policy.estimate import (
    COLD_START_PRIOR_S,
    duration_at,
    expected_duration,
    speedup,
    stat_update,
    type_priors,
    work_at_min_units,
)
from tangram_policy.types import DurationStat, Elasticity, PendingAction


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
