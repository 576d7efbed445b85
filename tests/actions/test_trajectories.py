"""Ended trajectories teach the policy what its jobs' trajectories have left."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from apps.actions.models import Action, TrajectoryPositionStat
from apps.actions.services import trajectories_fold_ended
from apps.scheduling.selectors import scheduling_snapshot
from apps.scheduling.services import schedule_round
from apps.tenants.models import Tenant
from tests.factories import ActionFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db


def _ran(
    tenant, trajectory: str, position: int, seconds: float, *, ago_s: float, job="swe", **fields
):
    """An action of ``trajectory`` at ``position`` that ran ``seconds``, ending
    ``ago_s`` seconds ago."""
    finished = timezone.now() - timedelta(seconds=ago_s)
    return ActionFactory(
        tenant=tenant,
        job=job,
        trajectory=trajectory,
        position=position,
        state="succeeded",
        started_at=finished - timedelta(seconds=seconds),
        finished_at=finished,
        **fields,
    )


def _stats(tenant) -> dict[tuple[int, str], tuple[int, float]]:
    return {
        (row.position, row.type): (row.count, round(row.rest_s, 6))
        for row in TrajectoryPositionStat.objects.filter(tenant=tenant, job="swe")
    }


def test_a_trajectory_counts_once_it_has_gone_quiet():
    """t1 ended long ago; t2's last run ended a moment ago; t3 still has an action
    queued. Only t1 is folded, once; t2 is folded when it has been quiet long
    enough, and a run it adds later counts at its own position and after its
    earlier one."""
    tenant = TenantFactory()
    for position, (type_, seconds) in enumerate((("edit", 3.0), ("test", 25.0), ("hidden", 63.0))):
        _ran(tenant, "t1", position, seconds, ago_s=900 - 100 * position, type=type_)
    _ran(tenant, "t2", 0, 3.0, ago_s=10, type="edit")
    _ran(tenant, "t3", 0, 3.0, ago_s=900, type="edit")
    ActionFactory(tenant=tenant, job="swe", trajectory="t3", position=1)
    assert trajectories_fold_ended(idle_s=300) == 1
    assert _stats(tenant) == {
        (0, "edit"): (1, 88.0),
        (1, "test"): (1, 63.0),
        (2, "hidden"): (1, 0.0),
    }
    assert trajectories_fold_ended(idle_s=300) == 0
    assert trajectories_fold_ended(idle_s=5) == 1  # t2
    assert _stats(tenant)[(0, "edit")] == (2, 88.0)
    _ran(tenant, "t2", 1, 5.0, ago_s=1, type="reward")
    assert trajectories_fold_ended(idle_s=0) == 1
    assert _stats(tenant) == {
        (0, "edit"): (2, 93.0),
        (1, "test"): (1, 63.0),
        (1, "reward"): (1, 0.0),
        (2, "hidden"): (1, 0.0),
    }
    assert set(
        Action.objects.filter(trajectory_counted=False).values_list("trajectory", "position")
    ) == {("t3", 0), ("t3", 1)}


def test_an_elastic_run_counts_at_its_minimum_units_and_a_cancelled_one_as_nothing():
    """A 1 s run, an elastic one of 10 s on 4 cores (40 s on one), a cancelled one."""
    tenant = TenantFactory()
    elastic = {"min_units": 1, "max_units": 4, "parallel_fraction": 1.0, "unit_kind": "cpu"}
    _ran(tenant, "t1", 0, 1.0, ago_s=900)
    _ran(tenant, "t1", 1, 10.0, ago_s=900, elasticity=elastic, units=4)
    ActionFactory(tenant=tenant, job="swe", trajectory="t1", position=2, state="cancelled")
    assert trajectories_fold_ended(idle_s=300) == 1
    assert _stats(tenant) == {
        (0, "sleep"): (1, 40.0),
        (1, "sleep"): (1, 0.0),
        (2, "sleep"): (1, 0.0),
    }


def test_the_round_sees_what_the_jobs_of_its_queued_actions_have_left(settings):
    """Two ended trajectories of job swe: 3 + 25 + 63 s. Of a queued edit that
    starts one (88 s left after it) and a hidden test at position 2, equal hints,
    room for one: the hidden test is placed. The snapshot carries only the jobs
    whose queued actions learn their rest."""
    settings.TANGRAM_POLICY = "tangram"
    NodeFactory(capacity={"cpu": 1, "memory": 100_000})
    tenant = TenantFactory()
    for name in ("t1", "t2"):
        for position, seconds in enumerate((3.0, 25.0, 63.0)):
            _ran(tenant, name, position, seconds, ago_s=900)
    _ran(tenant, "other", 0, 1.0, ago_s=900, job="math")
    assert trajectories_fold_ended() == 3
    edit = ActionFactory(tenant=tenant, job="swe", trajectory="t3", position=0, duration_hint_s=5)
    hidden = ActionFactory(tenant=tenant, job="swe", trajectory="t4", position=2, duration_hint_s=5)
    Action.objects.filter(pk=hidden.pk).update(
        submitted_at=edit.submitted_at + timedelta(seconds=1)
    )
    snapshot = scheduling_snapshot()
    (stat,) = snapshot.trajectory_stats.values()
    assert stat.at == {0: (2, 176.0), 1: (2, 126.0), 2: (2, 0.0)}
    assert schedule_round().placed == 1
    edit.refresh_from_db()
    hidden.refresh_from_db()
    assert (edit.state, hidden.state) == ("queued", "assigned")


@pytest.mark.django_db(transaction=True)
def test_the_sums_by_position_alone_are_refolded_by_position_and_type() -> None:
    """Migration 0012: the old per-position sums cannot be split by type, so they
    go, and the trajectories they came from are folded again from their actions."""
    before = [("actions", "0011_trajectory_position")]
    after = [("actions", "0012_trajectory_rest_by_type")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    tenant = old.get_model("tenants", "Tenant").objects.create(name="folded")
    finished = timezone.now() - timedelta(seconds=900)
    for position, (type_, seconds) in enumerate((("edit", 3.0), ("reward", 1.0))):
        old.get_model("actions", "Action").objects.create(
            tenant=tenant,
            job="swe",
            trajectory="t1",
            type=type_,
            timeout_s=60.0,
            position=position,
            trajectory_counted=True,
            state="succeeded",
            started_at=finished - timedelta(seconds=seconds),
            finished_at=finished,
        )
        old.get_model("actions", "TrajectoryPositionStat").objects.create(
            tenant=tenant, job="swe", position=position, count=1, work_s=seconds
        )

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
    assert not TrajectoryPositionStat.objects.exists()
    assert trajectories_fold_ended() == 1
    refolded = _stats(Tenant.objects.get(name="folded"))
    assert refolded == {(0, "edit"): (1, 1.0), (1, "reward"): (1, 0.0)}
