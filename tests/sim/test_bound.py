"""The no-wait floor: computed by hand on a small case, and never beaten by any policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tangram_sim.bound import no_wait_floor, savings_bound, srpt_completions
from tangram_sim.sim import simulate
from tangram_sim.workload import load_workload, workload_from_dict

WORKLOADS = Path(__file__).resolve().parents[2] / "fixtures" / "workloads"


def _elastic_task() -> dict[str, Any]:
    return {
        "name": "tiny",
        "pool": [{"name": "cpu", "count": 1, "capacity": {"cpu": 4}, "executors": ["sandbox"]}],
        "tasks": [
            {
                "name": "t",
                "steps": 3,
                "trajectories": 2,
                "train_s": 10,
                "turns": 2,
                "think_s": 5,
                "actions": [
                    {
                        "type": "run",
                        "executor": "sandbox",
                        "demand": {"cpu": 1},
                        "duration_s": 8,
                        "start_s": 0.5,
                        "setup_s": 30,
                        "affinity": ["image:x"],
                        "elasticity": {"min_units": 1, "max_units": 4, "parallel_fraction": 1.0},
                    }
                ],
                "reward": {
                    "type": "verify",
                    "executor": "sandbox",
                    "demand": {"cpu": 1},
                    "duration_s": 1,
                },
            }
        ],
    }


def test_the_floor_by_hand() -> None:
    """Each run 8 s / 4 units + 0.5 s start; a reward of 1 s. In the first step the
    image is set up 30 s after the first run is submitted, at 5 s: both wait to 35 s."""
    floor = no_wait_floor(workload_from_dict(_elastic_task()))
    assert floor.actions == 3 * 2 * 3  # steps x trajectories x (2 turns + reward)
    first = 35 + 2.5 + 5 + 2.5 + 1.0  # ends at 46 s, 10 s of it thinking
    later = 5 + 2.5 + 5 + 2.5 + 1.0
    assert floor.mean_act_s == pytest.approx(2 * ((first - 10) + 2 * (later - 10)) / 18)
    assert [step.on(floor.capacity) for step in floor.steps] == pytest.approx(
        [first + 10, later + 10, later + 10]
    )
    # 36 cpu-seconds a step (2 x (2 x 8.5 + 1)) on 4 cores: the trajectories bind.
    assert floor.steps[0].work == {"cpu": pytest.approx(36.0)}


def test_a_key_another_task_uses_may_be_warm_already() -> None:
    raw = _elastic_task()
    other = {**raw["tasks"][0], "name": "u", "steps": 1}
    raw["tasks"].append(other)
    floor = no_wait_floor(workload_from_dict(raw))
    assert floor.steps[0].chain_s == pytest.approx(5 + 2.5 + 5 + 2.5 + 1.0)


def _queue(trajectories: int, cores: int) -> dict[str, Any]:
    """Trajectories that each submit one 2 s call at once, on ``cores`` cores."""
    return {
        "name": "queue",
        "pool": [{"name": "cpu", "count": 1, "capacity": {"cpu": cores}, "executors": ["s"]}],
        "tasks": [
            {
                "name": "t",
                "steps": 1,
                "trajectories": trajectories,
                "turns": 1,
                "think_s": 0,
                "actions": [
                    {"type": "run", "executor": "s", "demand": {"cpu": 1}, "duration_s": 2},
                ],
            }
        ],
    }


def test_a_queue_bounds_the_act_and_fifo_meets_it() -> None:
    """Four 2 s calls at once on one core: at best they end at 2, 4, 6 and 8 s."""
    workload = workload_from_dict(_queue(4, 1))
    floor = no_wait_floor(workload)
    assert floor.mean_act_s == pytest.approx((2 + 4 + 6 + 8) / 4)
    assert simulate(workload, "fifo").summary()["mean_act_s"] == pytest.approx(5.0)
    # On four cores nothing queues.
    assert no_wait_floor(workload_from_dict(_queue(4, 4))).mean_act_s == pytest.approx(2.0)


def test_an_action_queues_for_the_nodes_that_run_it_not_for_the_whole_pool() -> None:
    """Four 2 s calls at once on the one 2-core node that runs them, beside a
    64-core node that runs only another executor. On the pool's 66 cores none
    would queue; on their two, two end at 2 s and two at 4 s at best (SRPT on
    two cores ends their 2 core-seconds each at 1, 2, 3 and 4 s, and none ends
    before 2 s), which fifo meets. The step's 8 core-seconds take 4 s there."""
    raw = _queue(4, 2)
    raw["pool"].append({"name": "big", "count": 1, "capacity": {"cpu": 64}, "executors": ["r"]})
    workload = workload_from_dict(raw)
    floor = no_wait_floor(workload)
    assert floor.mean_act_s == pytest.approx((2 + 2 + 3 + 4) / 4)
    assert floor.mean_step_s == pytest.approx(4.0)
    assert simulate(workload, "fifo").summary()["mean_act_s"] == pytest.approx(3.0)
    # With the big node running them too, the pool's 66 cores are theirs.
    raw["pool"][1]["executors"] = ["r", "s"]
    assert no_wait_floor(workload_from_dict(raw)).mean_act_s == pytest.approx(2.0)


def test_a_batch_member_holds_its_share_of_a_full_batch_at_its_minimum_units() -> None:
    """A batch of 4 runs the longest plus 0.2 of each other: of an 8 s call, at best
    8 x (0.8 / 4 + 0.2) = 3.2 GPU-seconds, at one GPU (more would hold more), while
    alone on its four GPUs it could end in 2 s."""
    raw = _queue(1, 1)
    raw["pool"][0]["capacity"] = {"gpu": 4}
    raw["tasks"][0]["actions"][0].update(
        demand={"gpu": 1},
        duration_s=8,
        batch={"limit": 4, "marginal": 0.2},
        elasticity={"min_units": 1, "max_units": 4, "parallel_fraction": 1.0, "unit_kind": "gpu"},
    )
    floor = no_wait_floor(workload_from_dict(raw))
    assert floor.steps[0].work == {"gpu": pytest.approx(3.2)}
    assert floor.mean_act_s == pytest.approx(2.0)


def test_srpt_by_hand() -> None:
    """(release, processing): the 1 s job released at 1 s preempts the 3 s one."""
    assert srpt_completions([(0.0, 3.0), (1.0, 1.0)]) == pytest.approx([2.0, 4.0])
    assert srpt_completions([(5.0, 0.0), (0.0, 1.0), (0.0, 1.0)]) == pytest.approx([1, 2, 5])
    assert srpt_completions([]) == []


def test_a_small_pool_bounds_the_step_and_the_savings() -> None:
    """On one core the step's 36 cpu-seconds bind: 36 s + 10 s of training. To
    match a 46 s step, no pool under a quarter of the four cores will do; to match
    a 26 s one, none under 2.25 cores; and nothing shortens it to 25 s."""
    raw = _elastic_task()
    del raw["tasks"][0]["actions"][0]["affinity"]  # no setup: every step alike
    small = json.loads(json.dumps(raw))
    small["pool"][0]["capacity"] = {"cpu": 1}
    assert no_wait_floor(workload_from_dict(small)).mean_step_s == pytest.approx(46.0)
    workload = workload_from_dict(raw)
    floor = no_wait_floor(workload)
    assert savings_bound(workload, [floor], 46.0) == pytest.approx(75.0, abs=1e-6)
    # A 26 s step leaves 16 s for the 36 cpu-seconds: 2.25 of the 4 cores.
    assert savings_bound(workload, [floor], 26.0) == pytest.approx(43.75, abs=1e-6)
    assert savings_bound(workload, [floor], 25.0) == 0.0  # not even the full pool


def _two_tasks(cores: float) -> dict[str, Any]:
    """Two tasks of one step and one trajectory, each submitting one 10 s call at once."""
    raw = _queue(1, 1)
    raw["pool"][0]["capacity"] = {"cpu": cores}
    raw["tasks"][0]["actions"][0]["duration_s"] = 10
    raw["tasks"].append({**raw["tasks"][0], "name": "u"})
    return raw


def test_tasks_that_share_the_pool_queue_for_it_over_their_runs() -> None:
    """On one core each step alone could end in 10 s, but the two calls' 20
    core-seconds end at 10 and 20 s at best (SRPT on one core): the steps
    average 15 s at least, and fifo meets it."""
    workload = workload_from_dict(_two_tasks(1))
    floor = no_wait_floor(workload)
    assert [step.on(floor.capacity) for step in floor.steps] == pytest.approx([10.0, 10.0])
    assert floor.mean_step_s == pytest.approx(15.0)
    assert simulate(workload, "fifo").summary()["mean_step_s"] == pytest.approx(15.0)
    # On two cores both end at 10 s.
    assert no_wait_floor(workload_from_dict(_two_tasks(2))).mean_step_s == pytest.approx(10.0)


def test_the_savings_bound_counts_tasks_sharing_the_pool() -> None:
    """To match a 15 s mean step the two calls need a whole core: on c < 1 the
    second ends at 20 / c (steps alone would allow 2/3 of a core, 66.7%)."""
    workload = workload_from_dict(_two_tasks(2))
    floor = no_wait_floor(workload)
    assert savings_bound(workload, [floor], 15.0) == pytest.approx(50.0, abs=1e-6)


def test_seeds_pool_as_the_bench_pools_them() -> None:
    workload = load_workload(WORKLOADS / "swe.yaml")
    one, two = (no_wait_floor(workload.with_seed(seed)) for seed in (1, 2))
    both = one + two
    assert both.actions == one.actions + two.actions
    assert both.mean_act_s == pytest.approx(
        (one.mean_act_s * one.actions + two.mean_act_s * two.actions) / both.actions
    )
    assert one.mean_act_s != two.mean_act_s  # the seed draws other trajectories
    # Each seed's tasks share its own pool: the step floors pool by their count.
    assert both.mean_step_s == pytest.approx(
        (one.mean_step_s * len(one.steps) + two.mean_step_s * len(two.steps)) / len(both.steps)
    )


@pytest.mark.parametrize("name", ["swe", "judge", "gpuburst", "rm", "gpuverify", "tools"])
@pytest.mark.parametrize("policy", ["partitioned", "fifo", "tangram"])
def test_no_policy_beats_the_floor(name: str, policy: str) -> None:
    """Every action-level policy replays the floor's actions, and none finishes one or a
    step sooner (static may: it starts a sandbox once per trajectory)."""
    workload = load_workload(WORKLOADS / f"{name}.yaml")
    floor = no_wait_floor(workload)
    result = simulate(workload, policy)
    summary = result.summary()
    assert len(result.acts) == floor.actions
    assert len(result.steps) == len(floor.steps)
    assert summary["mean_act_s"] >= floor.mean_act_s - 1e-9
    assert summary["mean_step_s"] >= floor.mean_step_s - 1e-9
