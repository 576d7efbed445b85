"""Random small workloads through every policy: each run ends, every action once.

The shipped workloads are a handful of shapes; users will write others. These
draw pools, quotas (with lending limits), tasks and action types from the
whole workload format, and check what must hold whatever the shape: no policy
leaves an action that fits the pool unplaced, every action of the workload
finishes exactly once and after it was submitted, every step is counted, and
no action-level policy beats the floors of ``tangram_sim.bound``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tangram_sim.bound import no_wait_floor, rooms
from tangram_sim.sim import BASELINES, PolicyError, Simulation
from tangram_sim.workload import workload_from_dict

POLICIES = (*BASELINES, "fifo", "tangram", "tangram-no-elastic", "tangram-no-batching")
TENANTS = ("t0", "t1", "t2")


def _duration(draw: st.DrawFn, low: float, high: float) -> Any:
    mean = draw(st.floats(low, high))
    return draw(
        st.sampled_from(
            (
                round(mean, 2),
                {"dist": "lognormal", "mean": mean, "cv": 0.8},
                {"dist": "exponential", "mean": mean},
            )
        )
    )


@st.composite
def _sandbox_action(draw: st.DrawFn, name: str, cores: int) -> dict[str, Any]:
    action: dict[str, Any] = {
        "type": name,
        "executor": "sandbox",
        "demand": {"cpu": draw(st.integers(1, min(cores, 2))), "memory": 1024},
        "duration_s": _duration(draw, 0.2, 20.0),
        "start_s": draw(st.sampled_from((0, 0.3))),
        "binding": draw(st.sampled_from(("trajectory", "task"))),
        "priority": draw(st.sampled_from((0, 0, 1))),
    }
    if draw(st.booleans()):
        action["elasticity"] = {
            "min_units": 1,
            "max_units": draw(st.integers(1, 8)),
            "parallel_fraction": draw(st.sampled_from((0.5, 0.9))),
        }
    if draw(st.booleans()):
        action["affinity"] = [draw(st.sampled_from(("image:a", "image:b")))]
        action["setup_s"] = draw(st.sampled_from((1, 10)))
    return action


@st.composite
def _gpu_action(draw: st.DrawFn, name: str, gpus: int) -> dict[str, Any]:
    action: dict[str, Any] = {
        "type": name,
        "executor": "gpu",
        "binding": "task",  # a trajectory holding a GPU through its reward deadlocks static
        "demand": {"gpu": draw(st.integers(1, min(gpus, 2))), "cpu": 1, "memory": 4096},
        "duration_s": _duration(draw, 0.5, 15.0),
        "affinity": ["model:rm"],
        "setup_s": draw(st.sampled_from((0, 5, 30))),
    }
    if draw(st.booleans()):
        action["batch"] = {"limit": draw(st.integers(2, 16)), "marginal": 0.1}
    elif draw(st.booleans()):
        action["elasticity"] = {
            "min_units": 1,
            "max_units": draw(st.integers(1, 4)),
            "parallel_fraction": 0.8,
            "unit_kind": "gpu",
        }
    return action


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    """Pools large enough for a fixed share per task (and static's sandboxes) to hold
    each one's largest action: with less, partitioning itself is impossible."""
    count = draw(st.integers(1, 3))
    cores = draw(st.integers(2 * (count + 1), 16))
    pool: list[dict[str, Any]] = [
        {
            "name": "cpu",
            "count": draw(st.sampled_from((1, 2, 3, 1.5))),
            "capacity": {"cpu": cores, "memory": 65536},
            "executors": ["sandbox"],
            "warm_slots": draw(st.integers(0, 2)),
        }
    ]
    gpus = draw(st.sampled_from((0, 2 * count, 8)))
    if gpus:
        pool.append(
            {
                "name": "gpu",
                "count": draw(st.integers(1, 2)),
                "capacity": {"gpu": gpus, "cpu": 8, "memory": 65536},
                "executors": ["gpu"],
                "gpu_groups": draw(st.sampled_from((1, 2))),
            }
        )
    api = draw(st.sampled_from((0, count, 4)))
    if api:
        pool.append({"name": "api", "capacity": {"api:judge": api}, "executors": ["judge"]})
    tenants = []
    for name in TENANTS[: draw(st.integers(1, 3))]:
        guaranteed = float(draw(st.integers(0, cores)))
        tenant: dict[str, Any] = {"name": name, "guaranteed": {"cpu": guaranteed}}
        if draw(st.booleans()):
            # What three tenants keep unlent leaves any one's largest action room.
            kept = min(int(guaranteed), (cores - 2) // 3)
            lent = draw(st.integers(int(guaranteed) - kept, int(guaranteed)))
            tenant["lending_limit"] = {"cpu": float(lent)}
        tenant["weight"] = draw(st.sampled_from((1, 2)))
        tenants.append(tenant)
    tasks = []
    for position in range(count):
        kinds = ["sandbox"] + (["gpu"] if gpus else []) + (["judge"] if api else [])
        actions = []
        for i in range(draw(st.integers(0, 2))):
            kind = draw(st.sampled_from(kinds))
            name = f"a{i}"
            if kind == "sandbox":
                actions.append(draw(_sandbox_action(name, cores)))
            elif kind == "gpu":
                actions.append(draw(_gpu_action(name, gpus)))
            else:
                actions.append(
                    {
                        "type": name,
                        "executor": "judge",
                        "demand": {"api:judge": 1},
                        "duration_s": _duration(draw, 0.5, 5.0),
                        "binding": "task",
                    }
                )
        task: dict[str, Any] = {
            "name": f"task{position}",
            "tenant": draw(st.sampled_from([t["name"] for t in tenants])),
            "steps": draw(st.integers(1, 2)),
            "trajectories": draw(st.integers(1, 6)),
            "turns": draw(st.sampled_from((0, 1, {"dist": "uniform", "low": 1, "high": 4}))),
            "think_s": _duration(draw, 0.5, 10.0),
            "train_s": draw(st.sampled_from((0, 5))),
            "start_s": draw(st.sampled_from((0, 3))),
            "actions": actions,
        }
        if not actions or task["turns"] == 0 or draw(st.booleans()):
            kind = draw(st.sampled_from(kinds))
            if kind == "gpu":
                task["reward"] = draw(_gpu_action("score", gpus))
            else:
                task["reward"] = draw(_sandbox_action("check", cores))
        tasks.append(task)
    return {
        "name": "random",
        "seed": draw(st.integers(1, 1000)),
        "sim": {"round_interval_s": draw(st.sampled_from((0, 0, 0.5)))},
        "pool": pool,
        "tenants": tenants,
        "tasks": tasks,
    }


def _sandbox(demand: int, binding: str, duration_s: float = 1.0) -> dict[str, Any]:
    return {
        "executor": "sandbox",
        "demand": {"cpu": demand, "memory": 1024},
        "duration_s": duration_s,
        "binding": binding,
    }


#: Found by the deep fuzz: t1 keeps its one guaranteed core unlent, t0's five
#: trajectories hold sandboxes on 5 of the 6 cores, task1's 2-core reward waits.
STATIC_DEADLOCK: dict[str, Any] = {
    "name": "random",
    "pool": [{"name": "cpu", "capacity": {"cpu": 6, "memory": 65536}, "executors": ["sandbox"]}],
    "tenants": [
        {"name": "t0", "guaranteed": {"cpu": 0.0}},
        {"name": "t1", "guaranteed": {"cpu": 1.0}, "lending_limit": {"cpu": 0.0}},
    ],
    "tasks": [
        {
            "name": "task0",
            "tenant": "t0",
            "steps": 1,
            "trajectories": 1,
            "turns": 0,
            "think_s": 1.0,
            "train_s": 0,
            "actions": [],
            "reward": {"type": "check", **_sandbox(1, "trajectory")},
        },
        {
            "name": "task1",
            "tenant": "t0",
            "steps": 1,
            "trajectories": 4,
            "turns": 1,
            "think_s": 1.0,
            "train_s": 0,
            "actions": [{"type": "a0", **_sandbox(1, "trajectory", 2.0)}],
            "reward": {"type": "check", **_sandbox(2, "task")},
        },
    ],
}


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@example(raw=STATIC_DEADLOCK)
@given(raw=workloads())
def test_every_policy_finishes_every_action_of_a_random_workload(raw: dict[str, Any]) -> None:
    workload = workload_from_dict(raw)
    steps = sum(task.steps for task in workload.tasks)
    finished: dict[str, int] = {}
    lending = any("lending_limit" in tenant for tenant in raw["tenants"])
    floor = no_wait_floor(workload)
    for policy in POLICIES:
        simulation = Simulation(workload, policy, keep_records=True)
        try:
            result = simulation.run()  # a stuck run raises PolicyError, naming the action
        except PolicyError as error:
            # Static holds each trajectory's sandbox to its end. Where another
            # tenant keeps part of its guarantee unlent, the held sandboxes can
            # fill all the room their tenant may take while their trajectories
            # wait on task-bound work: a deadlock of static provisioning itself
            # (the bench reports it so), gone without the lending limit.
            if policy == "static" and lending and "nothing else is left to finish" in str(error):
                tenants = [
                    {k: v for k, v in tenant.items() if k != "lending_limit"}
                    for tenant in raw["tenants"]
                ]
                Simulation(workload_from_dict({**raw, "tenants": tenants}), policy).run()
                continue
            raise
        assert len(result.steps) == steps, policy
        ids = [record.id for record in result.records]
        assert len(ids) == len(set(ids)), policy
        for record in result.records:
            assert record.submitted <= record.started <= record.finished, (policy, record)
        if policy != "static":  # static's records hold its leases too
            finished[policy] = len(ids)
            # No action-level policy beats what tangram_sim.bound says none can.
            summary = result.summary()
            assert summary["mean_act_s"] >= floor.mean_act_s - 1e-9, policy
            assert summary["mean_step_s"] >= floor.mean_step_s - 1e-9, policy
    assert len(set(finished.values())) == 1, finished


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=workloads(), factor=st.sampled_from((0.5, 0.3)))
def test_no_policy_beats_the_step_floor_on_a_smaller_pool(
    raw: dict[str, Any], factor: float
) -> None:
    """The savings bound reads the floors on smaller pools, where tasks that run at
    once queue for the pool the most (``tangram_sim.bound``)."""
    workload = workload_from_dict(raw)
    smaller = workload.scaled(factor)
    floor_s = no_wait_floor(workload).mean_step_on(rooms(smaller)[0])
    for policy in ("fifo", "tangram"):
        try:
            result = Simulation(smaller, policy).run()
        except PolicyError:  # an action larger than any node of the smaller pool
            continue
        assert result.summary()["mean_step_s"] >= floor_s - 1e-9, policy
