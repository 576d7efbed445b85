"""The simulator against small cases computed by hand, and each baseline's defining behaviour."""

from __future__ import annotations

import io
import json
import math
import platform
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tangram_policy.estimate import trajectory_stat
from tangram_policy.types import (
    Decision,
    Placement,
    Resize,
    Snapshot,
    TrajectoryStat,
    TypeLoad,
)
from tangram_sim.sim import PolicyError, Simulation, simulate
from tangram_sim.trace import read_trace, replay, write_trace
from tangram_sim.workload import Workload, WorkloadError, load_workload, workload_from_dict

WORKLOADS = Path(__file__).resolve().parents[2] / "fixtures" / "workloads"


def _workload(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "tiny",
        "pool": [{"name": "cpu", "count": 1, "capacity": {"cpu": 1}, "executors": ["sandbox"]}],
        "tasks": [
            {
                "name": "t",
                "steps": 1,
                "trajectories": 1,
                "train_s": 3,
                "turns": 2,
                "think_s": 10,
                "actions": [
                    {
                        "type": "run",
                        "executor": "sandbox",
                        "demand": {"cpu": 1},
                        "duration_s": 5,
                        "setup_s": 4,
                        "start_s": 1,
                        "affinity": ["image:x"],
                    }
                ],
            }
        ],
    }
    raw.update(overrides)
    return raw


def _two_trajectories() -> Mapping[str, Any]:
    raw = _workload()
    raw["tasks"][0]["trajectories"] = 2
    return raw


def test_one_trajectory_by_hand() -> None:
    raw = _workload()
    raw["tasks"][0]["actions"][0].update(setup_s=0, start_s=0)
    result = simulate(workload_from_dict(raw), "fifo")
    # think 10, run 5 (10..15), think 10, run 5 (25..30); train 3.
    assert result.acts == [5.0, 5.0]
    assert result.steps == [33.0]


def test_static_holds_the_sandbox_for_the_whole_trajectory_and_the_wait_counts() -> None:
    result = simulate(workload_from_dict(_two_trajectories()), "static")
    # A: lease at 0, cold setup 4 + start 1 -> ready 5; runs 15..20 and 30..35.
    #    First ACT counts the 5 s it waited for its sandbox: 20 - (15 - 5) = 10.
    # B: waits for A's sandbox until 35, warm: start 1 -> ready 36; runs 46..51, 61..66.
    #    First ACT: 51 - (46 - 36) = 41. Step ends at 66 + 3.
    assert sorted(result.acts) == [5.0, 5.0, 10.0, 41.0]
    assert result.steps == [69.0]
    # The sandbox is held while the LLM thinks: 0..35 and 35..66.
    assert result.busy["cpu"] == pytest.approx(66.0)


def test_fifo_binds_per_action_and_pays_the_start_per_action() -> None:
    result = simulate(workload_from_dict(_two_trajectories()), "fifo")
    # Both submit at 10. A: cold setup 4 + start 1 + run 5 -> 20 (ACT 10).
    # B: starts at 20 on the now warm node: 1 + 5 -> 26 (ACT 16).
    # A: submits 30 -> 36 (ACT 6); B: submits 36, starts when A frees -> 42 (ACT 6).
    assert sorted(result.acts) == [6.0, 6.0, 10.0, 16.0]
    assert result.steps == [45.0]
    assert result.busy["cpu"] == pytest.approx(10 + 6 + 6 + 6)


def test_tangram_gives_an_idle_pool_to_an_elastic_action() -> None:
    raw = _workload()
    raw["pool"][0]["capacity"] = {"cpu": 40}
    raw["tasks"][0]["turns"] = 1
    raw["tasks"][0]["actions"][0].update(
        setup_s=0,
        start_s=0,
        duration_s=8,
        elasticity={"min_units": 1, "max_units": 4, "parallel_fraction": 1.0},
    )
    workload = workload_from_dict(raw)
    assert simulate(workload, "tangram").acts == [2.0]
    assert simulate(workload, "fifo").acts == [8.0]
    assert simulate(workload, "static").acts == [8.0]


def test_an_elastic_action_gives_units_back_then_grows_again_when_they_are_free() -> None:
    raw = _workload()
    raw["pool"][0]["capacity"] = {"cpu": 4}
    elastic, rigid = raw["tasks"][0], dict(raw["tasks"][0])
    elastic.update(turns=1, think_s=0)
    elastic["actions"] = [
        {
            "type": "shard",
            "executor": "sandbox",
            "demand": {"cpu": 1},
            "duration_s": 100,
            "elasticity": {"min_units": 1, "max_units": 4, "parallel_fraction": 1.0},
        }
    ]
    rigid.update(name="r", turns=1, think_s=10)
    rigid["actions"] = [
        {"type": "run", "executor": "sandbox", "demand": {"cpu": 2}, "duration_s": 5}
    ]
    raw["tasks"] = [elastic, rigid]
    workload = workload_from_dict(raw)
    # The shard gets all 4 cores of the idle pool (lent cores keep no headroom): 25 s.
    # At 10 s the 2-core run waits; two cores come back: 40% done, and the run goes
    # at once (10..15). 10 s at 2 units: 50% done at 15, when the run's cores are
    # free again and the shard takes them: the other 50% at 4 units, 12.5 s.
    result = simulate(workload, "tangram", keep_records=True)
    assert result.acts == pytest.approx([5.0, 27.5])
    assert {r.type: r.units for r in result.records} == {"t.shard": 4, "r.run": 1}
    # Cores held: 4 for 10 s, 2 for 5 s, 4 for 12.5 s, and 2 for the run's 5 s.
    assert result.busy["cpu"] == pytest.approx(4 * 10 + 2 * 5 + 4 * 12.5 + 2 * 5)
    # Not grown again: the other 60% at 2 units takes 30 s (done at 40).
    assert simulate(workload, "tangram-no-growing").acts == pytest.approx([5.0, 40.0])
    # Units fixed at placement: the shard gets 3 (the headroom keeps 0.4 free),
    # 100/3 s, and the run waits for them.
    held = simulate(workload, "tangram-no-shrinking")
    assert held.acts == pytest.approx([100 / 3, 100 / 3 + 5 - 10])


def _reward_workload(marginal: float) -> Mapping[str, Any]:
    return _workload(
        pool=[{"name": "gpu", "count": 1, "capacity": {"gpu": 1}, "executors": ["rm"]}],
        tasks=[
            {
                "name": "r",
                "steps": 1,
                "trajectories": 4,
                "turns": 0,
                "think_s": 10,
                "reward": {
                    "type": "score",
                    "executor": "rm",
                    "demand": {"gpu": 1},
                    "duration_s": 2,
                    "batch": {"limit": 4, "marginal": marginal},
                },
            }
        ],
    )


def test_reward_calls_coalesce_into_a_batch_when_they_queue() -> None:
    workload = workload_from_dict(_reward_workload(0.1))
    tangram = simulate(workload, "tangram")
    # All four submit at 10 onto one GPU. Nothing of the type has run alone, so the
    # first does (2 s, and a batch can be measured against it); then the other
    # three in one batch of 2 + 0.1 * 2 * 2 = 2.4 s, from 12.
    assert sorted(tangram.acts) == pytest.approx([2.0, 4.4, 4.4, 4.4])
    fifo = simulate(workload, "fifo")
    assert sorted(fifo.acts) == pytest.approx([2.0, 4.0, 6.0, 8.0])
    assert simulate(workload, "tangram-no-batching").acts == pytest.approx(fifo.acts)


def test_a_batch_type_never_measured_is_sized_not_sent_in_one_wave() -> None:
    """16 calls of 2 s at once on one GPU, batches of up to 16 at a marginal of 0.5.

    One wave of 16 would run 2 + 0.5 x 15 x 2 = 17 s: every member's ACT 17, as
    fifo's mean. The first runs alone (2 s). Unmeasured, a batch is assumed to
    cost 0.25 a member: 5 of the 15 left (6 s, to 18). Measured at 0.5, blended
    with the prior (0.33, then 0.375): 5 (to 24) and the last 5 (to 30).
    """
    raw = _reward_workload(0.5)
    raw["tasks"][0]["trajectories"] = 16
    raw["tasks"][0]["reward"]["batch"]["limit"] = 16
    workload = workload_from_dict(raw)
    assert sorted(simulate(workload, "tangram").acts) == pytest.approx(
        [2.0] + [8.0] * 5 + [14.0] * 5 + [20.0] * 5
    )
    fifo = simulate(workload, "fifo").acts
    assert sum(fifo) / len(fifo) == pytest.approx(17.0)


def test_the_simulator_learns_what_a_batch_costs_from_what_a_scheduler_sees() -> None:
    """From a batch's members and run time, against runs seen alone: each of a batch
    of k runs 2 + 0.9 x 2 x (k - 1) s where one alone runs 2 s, a marginal of 0.9."""
    raw = _reward_workload(0.9)
    raw["tasks"][0].update(
        trajectories=12, steps=2, think_s={"dist": "uniform", "low": 1, "high": 20}
    )
    simulation = Simulation(workload_from_dict(raw), "tangram")
    simulation.run()
    key = ("default", "r.score")
    assert simulation.stats[key].mean_s == pytest.approx(2.0)
    learned = simulation.batch_stats[key]
    assert learned.count >= 1
    assert learned.marginal == pytest.approx(0.9)


def _lending(lending_limit: dict[str, float]) -> dict[str, Any]:
    """Tenant b's four 10 s jobs at t = 0 on two 2-core nodes; tenant a's 1 s call at t = 1."""
    raw = _workload(
        tenants=[
            {
                "name": "a",
                "guaranteed": {"cpu": 2},
                "limit": {"cpu": 4},
                "lending_limit": lending_limit,
            },
            {"name": "b", "guaranteed": {"cpu": 2}, "limit": {"cpu": 4}},
        ]
    )
    raw["pool"][0].update(count=2, capacity={"cpu": 2})
    borrower = raw["tasks"][0]
    borrower.update(tenant="b", trajectories=4, turns=1, think_s=0, train_s=0)
    borrower["actions"][0].update(duration_s=10, setup_s=0, start_s=0, affinity=[])
    lender = json.loads(json.dumps(borrower))
    lender.update(name="a", tenant="a", trajectories=1, start_s=1)
    lender["actions"][0]["duration_s"] = 1
    raw["tasks"].append(lender)
    return raw


@pytest.mark.parametrize(
    ("lending_limit", "acts"),
    [
        # Lent in full: four 10 s jobs take all 4 cores; the lender's 1 s call,
        # at t = 1, waits for the first to end (at 10): ACT 10.
        ({}, {"b": [10.0] * 4, "a": [10.0]}),
        # One of its 2 idle cores lent: the fourth job waits for a borrowed core
        # (10..20, ACT 20; the idle guarantee stays free after the call, 1..2).
        ({"cpu": 1}, {"b": [10.0] * 3 + [20.0], "a": [1.0]}),
    ],
)
def test_a_lending_limit_keeps_the_rest_of_the_guarantee_for_its_owner_by_hand(
    lending_limit: dict[str, float], acts: dict[str, list[float]]
) -> None:
    raw = _lending(lending_limit)
    result = simulate(workload_from_dict(raw), "tangram", keep_records=True)
    by_tenant: dict[str, list[float]] = {"a": [], "b": []}
    for record in sorted(result.records, key=lambda r: r.finished):
        by_tenant[record.tenant].append(record.act_s)
    assert by_tenant == acts


@pytest.mark.parametrize(
    ("lending_limit", "shortfall"),
    [
        # Lent in full: the lender asks for 1 of its 2 guaranteed cores at t = 1
        # and holds none until the first borrowed job ends at 10: 9 core-seconds.
        # The borrower holds its guarantee throughout.
        ({}, {"a": {"cpu": 9.0}}),
        # One core kept back: the call runs at once; the borrower holds 3 cores,
        # its guarantee and one more, while its fourth job waits: nobody is short.
        ({"cpu": 1}, {}),
    ],
)
def test_the_simulator_counts_the_guarantee_a_tenant_asked_for_while_others_held_it(
    lending_limit: dict[str, float], shortfall: dict[str, dict[str, float]]
) -> None:
    result = simulate(workload_from_dict(_lending(lending_limit)), "tangram")
    assert _flat(result.shortfall) == pytest.approx(_flat(shortfall))


class _InPairs:
    """Places tenant a's pending actions on the first node only two at a time (it waits
    with room free), anyone else's at once."""

    name = "in-pairs"

    def decide(self, snapshot: Snapshot) -> Decision:
        mine = [a for a in snapshot.pending if a.tenant == "a"]
        ready = [a for a in snapshot.pending if a.tenant != "a"]
        if len(mine) >= 2:
            ready += mine
        node = snapshot.nodes[0].id
        return Decision(tuple(Placement(a.id, node, dict(a.demand)) for a in ready))


def test_a_guarantee_left_free_while_its_tenant_waits_is_not_counted_short() -> None:
    """Tenant a, guaranteed 2 of 3 cores; b borrows one for 0..20 s. a's first call
    waits 3 s for its second with 2 cores free: that wait is the policy's, not
    b's, though b borrows meanwhile."""
    raw = _workload(
        tenants=[
            {"name": "a", "guaranteed": {"cpu": 2}, "limit": {"cpu": 3}},
            {"name": "b", "guaranteed": {}, "limit": {"cpu": 3}},
        ]
    )
    raw["pool"][0]["capacity"] = {"cpu": 3}
    first = raw["tasks"][0]
    first.update(tenant="a", turns=1)
    first["actions"][0].update(setup_s=0, start_s=0, affinity=[])
    second = json.loads(json.dumps(first))
    second.update(name="u", start_s=3)
    borrower = json.loads(json.dumps(first))
    borrower.update(name="b", tenant="b", think_s=0)
    borrower["actions"][0]["duration_s"] = 20
    raw["tasks"] += [second, borrower]
    result = simulate(workload_from_dict(raw), _InPairs())
    # b's job 0..20; a's calls submitted at 10 and 13, both run 13..18.
    assert sorted(result.acts) == [5.0, 8.0, 20.0]
    assert result.shortfall == {}


def _flat(nested: Mapping[str, Mapping[str, float]]) -> dict[tuple[str, str], float]:
    return {(outer, inner): v for outer, values in nested.items() for inner, v in values.items()}


def _one_tenant_lending(tmp_path: Path) -> Path:
    """Both tasks of ``_lending`` in one tenant, b, guaranteed all 4 cores."""
    raw = _lending({})
    raw["tenants"] = [{"name": "b", "guaranteed": {"cpu": 4}, "limit": {"cpu": 4}}]
    raw["tasks"][1]["tenant"] = "b"
    path = tmp_path / "own.yaml"
    path.write_text(json.dumps(raw))
    return path


def _lending_bench(path: Path, *argv: str) -> tuple[str, dict[str, list[str]]]:
    """``bench.lending``'s header and rows, by label."""
    from bench.lending import main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main([str(path), *argv, "--seeds", "1"]) == 0
    lines = out.getvalue().splitlines()
    return lines[0], {line[:24].strip(): line[24:].split() for line in lines[2:]}


def _assert_lending_bench_refuses(path: Path, refusals: dict[tuple[str, ...], str]) -> None:
    from bench.lending import main

    for argv, message in refusals.items():
        with pytest.raises(SystemExit) as exited, redirect_stderr(io.StringIO()) as err:
            main([str(path), *argv])
        assert exited.value.code == 2
        assert message in err.getvalue()


def test_the_lending_bench_prints_the_lenders_wait_for_each_limit(tmp_path: Path) -> None:
    path = tmp_path / "lending.yaml"
    path.write_text(json.dumps(_lending({})))  # JSON is YAML
    _, rows = _lending_bench(path, "--tenant", "a", "--limits", "all,1")
    # mean ACT, step, the lender's wait and p95, the others' wait and p95
    assert rows["tangram, lends all"][2] == "9.00" and rows["tangram, lends 1"][2] == "0.00"
    assert rows["tangram, lends 1"][4] == "2.50"  # one of b's four jobs waits 10 s


def test_the_lending_bench_gives_a_task_a_tenant_of_its_own(tmp_path: Path) -> None:
    """The call waits for a job to end (9 s) until it has a tenant of its own that
    lends only one of its 2 cores."""
    path = _one_tenant_lending(tmp_path)
    header, rows = _lending_bench(path, "--own-tenant", "a", "--limits", "all,1")
    assert header.startswith("tiny: a guarantees 2 cpu, moved from b's 4")
    assert rows["tangram, as written"][2] == "9.00"  # the call, task a, in b
    assert rows["tangram, lends all"][2] == "9.00"
    assert rows["tangram, lends 1"][2] == "0.00"
    assert rows["tangram, lends 1"][4] == "2.50"  # one of the four jobs waits 10 s
    _assert_lending_bench_refuses(
        path,
        {
            ("--own-tenant", "nope"): "--own-tenant: expected one of",
            ("--own-tenant", "a", "--tenant", "b"): "give one or the other",
            ("--own-tenant", "a", "--guarantee", "5"): "--guarantee: expected a number in (0, 4]",
            ("--own-tenant", "a", "--kind", "gpu"): "is guaranteed no gpu",
            (): "--tenant: required without --own-tenant",
            ("--own-tenant", "a", "--guarantee", "0"): "--guarantee: expected a number in (0, 4]",
        },
    )


def test_the_lending_bench_splits_a_limit_for_a_tenant_of_its_own(tmp_path: Path) -> None:
    """As above, but ``--own-limit 2`` splits b's limit of 4: b's jobs run two at
    a time (two wait 10 s), and the call finds a's 2 cores idle, however much a lends."""
    path = _one_tenant_lending(tmp_path)
    header, rows = _lending_bench(
        path, "--own-tenant", "a", "--own-limit", "2", "--limits", "all,1"
    )
    assert header.startswith("tiny: a guarantees 2 cpu, moved from b's 4; limit 2 of its 4")
    assert rows["tangram, as written"][2] == "9.00"
    for row in ("tangram, lends all", "tangram, lends 1", "fifo"):  # fifo on the same quotas
        assert rows[row][2] == "0.00" and rows[row][4] == "5.00"
    _assert_lending_bench_refuses(
        path,
        {
            ("--own-tenant", "a", "--own-limit", "3"): "--own-limit: expected a number in [2, 2]",
            ("--tenant", "b", "--own-limit", "2"): "--own-limit: only with --own-tenant",
        },
    )


def test_tangram_keeps_each_image_on_a_node_that_holds_it_when_nodes_keep_one() -> None:
    """Two tasks with an image each, on two nodes that keep one image warm. Blind
    to warm slots, best fit pulls one image over the other while it is in use, so
    the next action of that image pulls again (thrashing); tangram sets an image
    up only on a free slot, or waits for a node that holds it. The trajectories'
    other first actions wait for their image's pull in the queue, not on a core,
    and start when it ends."""
    raw = _workload()
    raw["pool"][0].update(count=2, capacity={"cpu": 4}, warm_slots=1)
    raw["tasks"][0].update(trajectories=4, turns=6, think_s=2, train_s=0)
    raw["tasks"][0]["actions"][0].update(duration_s=3, setup_s=20, start_s=0)
    second = json.loads(json.dumps(raw["tasks"][0]))
    second["name"] = "u"
    second["actions"][0]["affinity"] = ["image:y"]
    raw["tasks"].append(second)
    workload = workload_from_dict(raw)

    def pulls(policy: str) -> tuple[int, dict[str, set[str]]]:
        sim = Simulation(workload, policy, keep_records=True)
        records = sim.run().records
        held: dict[str, int] = {}
        for node in sim.nodes.values():
            for key in node.warm:
                held[key] = held.get(key, 0) + 1
        assert sim._warm_nodes == held  # what Snapshot.warm_nodes says, kept as keys come and go
        image = {"t": "image:x", "u": "image:y"}
        last: dict[str, float] = {}
        for record in records:
            key = image[record.type.split(".")[0]]
            last[key] = max(last.get(key, 0.0), record.started)
        assert sim._warm_used_at == last  # Snapshot.warm_used_at: each key's last start
        nodes: dict[str, set[str]] = {}
        for record in records:
            nodes.setdefault(record.type.split(".")[0], set()).add(record.node)
        if policy == "tangram":
            first = [r for r in records if r.submitted == 2.0]
            assert sorted(r.started for r in first) == [2.0] * 2 + [22.0] * 6
        # An action that waited for a pull ran for more than its 3 s.
        return sum(r.finished - r.started > 3.0 + 1e-9 for r in records), nodes

    count, nodes = pulls("tangram")
    assert count == 2  # the two pulls, one per image
    assert nodes["t"].isdisjoint(nodes["u"])
    # Blind to warm slots, half or more of the 48 actions pull (fifo: 42).
    assert pulls("tangram-no-affinity")[0] >= 24
    assert pulls("fifo")[0] > 24


def test_partitioned_keeps_each_task_on_its_share() -> None:
    raw = _workload()
    raw["pool"][0].update(count=2, capacity={"cpu": 4})
    second = json.loads(json.dumps(raw["tasks"][0]))
    second["name"] = "u"
    raw["tasks"].append(second)
    workload = workload_from_dict(raw)
    sim = Simulation(workload, "partitioned", keep_records=True)
    result = sim.run()
    nodes = {r.type.split(".")[0]: set() for r in result.records}
    for record in result.records:
        nodes[record.type.split(".")[0]].add(record.node)
    assert nodes["t"].isdisjoint(nodes["u"])
    shared = simulate(workload, "fifo", keep_records=True)
    assert len({r.node for r in shared.records}) >= 1


def _wide_pool() -> Workload:
    """More nodes than a round views whole (``FULL_VIEW_NODES``): a sandbox group
    whose nodes keep one image, and GPU hosts for a reward model."""
    raw = _workload(
        name="wide",
        pool=[
            {
                "name": "cpu",
                "count": 600,
                "capacity": {"cpu": 2},
                "executors": ["sandbox"],
                "warm_slots": 1,
            },
            {"name": "gpu", "count": 40, "capacity": {"gpu": 1, "cpu": 2}, "executors": ["gpu"]},
        ],
    )
    task = raw["tasks"][0]
    task.update(
        steps=2,
        trajectories=200,
        turns={"dist": "uniform", "low": 1, "high": 4},
        think_s={"dist": "lognormal", "mean": 3, "cv": 0.5},
    )
    task["actions"][0].update(
        duration_s={"dist": "lognormal", "mean": 4, "cv": 0.5},
        elasticity={"min_units": 1, "max_units": 2, "parallel_fraction": 0.8},
    )
    task["reward"] = {
        "type": "score",
        "executor": "gpu",
        "binding": "task",
        "demand": {"gpu": 1},
        "duration_s": 2,
        "setup_s": 5,
        "affinity": ["model:r"],
    }
    return workload_from_dict(raw)


def test_a_round_on_a_large_pool_views_enough_nodes_for_what_is_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A round on more than ``FULL_VIEW_NODES`` nodes views only the nodes its
    pending actions could use, worked out from a count per pending type: the
    count matches the queue, and the run ends as with every node in view."""
    workload = _wide_pool()
    viewed = Simulation(workload, "tangram")
    counted: list[tuple[dict[str, int], dict[str, int]]] = []
    round_ = viewed._round

    def counting_round() -> None:
        queued: dict[str, int] = {}
        for action in viewed.pending.values():
            queued[action.type.id] = queued.get(action.type.id, 0) + 1
        counts = {type_id: count for type_id, (_, count) in viewed._pending_types.items()}
        counted.append((queued, counts))
        round_()

    monkeypatch.setattr(viewed, "_round", counting_round)
    partial = viewed.run().summary()
    assert sum(bool(queued) for queued, _ in counted) > 100
    assert all(queued == counts for queued, counts in counted)
    assert not viewed._pending_types
    monkeypatch.setattr("tangram_sim.sim.FULL_VIEW_NODES", 10**6)
    whole = Simulation(workload, "tangram").run().summary()
    assert partial["actions"] == whole["actions"]
    assert partial["mean_step_s"] == pytest.approx(whole["mean_step_s"], rel=0.02)
    assert partial["mean_act_s"] == pytest.approx(whole["mean_act_s"], rel=0.05)


def test_every_policy_replays_the_same_actions() -> None:
    workload = load_workload(WORKLOADS / "mixed.yaml")
    small = workload_from_dict(
        {
            "name": "small-mix",
            "seed": 7,
            "pool": [
                {
                    "name": g.name,
                    "count": g.count,
                    "capacity": dict(g.capacity),
                    "executors": sorted(g.executors),
                    "gpu_groups": g.gpu_groups,
                }
                for g in workload.pool
            ],
            "tasks": [
                {
                    "name": "m",
                    "steps": 2,
                    "trajectories": 20,
                    "turns": {"dist": "uniform", "low": 1, "high": 4},
                    "think_s": {"dist": "lognormal", "mean": 5, "cv": 0.5},
                    "actions": [
                        {
                            "type": "py",
                            "executor": "sandbox",
                            "demand": {"cpu": 1},
                            "duration_s": {"dist": "exponential", "mean": 1},
                        }
                    ],
                },
            ],
        }
    )
    bases = {}
    for name in ("static", "partitioned", "fifo", "tangram"):
        result = simulate(small, name, keep_records=True)
        bases[name] = sorted(round(r.base_s, 9) for r in result.records)
        assert len(result.steps) == 2
    assert len({tuple(v) for v in bases.values()}) == 1


class _Greedy:
    """A broken policy: places everything on the first node."""

    name = "greedy"

    def decide(self, snapshot: Snapshot) -> Decision:
        node = snapshot.nodes[0]
        return Decision(tuple(Placement(a.id, node.id, dict(a.demand)) for a in snapshot.pending))


class _Placer:
    """Places every pending action on the first node with the GPU ids it is given."""

    name = "placer"

    def __init__(self, gpus: tuple[str, ...]) -> None:
        self.gpus = gpus

    def decide(self, snapshot: Snapshot) -> Decision:
        node = snapshot.nodes[0].id
        return Decision(
            tuple(Placement(a.id, node, dict(a.demand), gpus=self.gpus) for a in snapshot.pending)
        )


class _HintsSeen:
    """fifo's decisions, noting the hint of every action it sees queued."""

    name = "hints-seen"

    def __init__(self) -> None:
        from tangram_policy.fifo import FifoPolicy

        self.inner = FifoPolicy()
        self.hints: dict[str, float | None] = {}
        self.remaining: dict[str, float | None] = {}

    def decide(self, snapshot: Snapshot) -> Decision:
        for action in snapshot.pending:
            self.hints[action.id] = action.duration_hint_s
            self.remaining[action.id] = action.remaining_hint_s
        return self.inner.decide(snapshot)


def _hints(raw: Mapping[str, Any]) -> tuple[dict[str, float | None], dict[str, float]]:
    """The hints a policy saw per action id, and each action's run time at min units."""
    policy = _HintsSeen()
    result = Simulation(workload_from_dict(raw), policy, keep_records=True).run()
    return policy.hints, {record.id: record.base_s for record in result.records}


class _LoadsSeen:
    """fifo's decisions, noting each round's ``Snapshot.type_loads``."""

    name = "loads-seen"

    def __init__(self) -> None:
        from tangram_policy.fifo import FifoPolicy

        self.inner = FifoPolicy()
        self.seen: list[tuple[float, Mapping[tuple[str, str], TypeLoad]]] = []

    def decide(self, snapshot: Snapshot) -> Decision:
        self.seen.append((snapshot.now, snapshot.type_loads))
        return self.inner.decide(snapshot)


def test_each_round_sees_what_a_type_holds_queues_and_held_lately() -> None:
    """One trajectory's two 5 s runs of 2 cores: submitted at 10 (runs to 15) and 25.
    Its mean held is an exponential average over LOAD_WINDOW_S (300 s) of the 2
    cores held from 10 to 15 and none since."""
    raw = _workload()
    raw["pool"][0]["capacity"] = {"cpu": 2}
    raw["tasks"][0]["actions"][0].update(setup_s=0, start_s=0, demand={"cpu": 2})
    policy = _LoadsSeen()
    Simulation(workload_from_dict(raw), policy).run()
    assert [now for now, _ in policy.seen] == [10.0, 25.0]
    first, second = (loads[("default", "t.run")] for _, loads in policy.seen)
    assert (first.kind, first.held, first.queued, first.mean_held) == ("cpu", 0.0, 2.0, 0.0)
    lately = 2.0 * (1.0 - math.exp(-5.0 / 300.0)) * math.exp(-10.0 / 300.0)
    assert (second.held, second.queued) == (0.0, 2.0)
    assert second.mean_held == pytest.approx(lately)


def test_clients_hint_run_times_only_where_the_workload_says_so() -> None:
    raw = _workload()
    raw["tasks"][0]["trajectories"] = 4
    action = raw["tasks"][0]["actions"][0]
    action["duration_s"] = {"dist": "lognormal", "mean": 5, "cv": 1.0}
    hints, _ = _hints(raw)
    assert len(hints) == 8 and set(hints.values()) == {None}
    action["hint_cv"] = 0
    hints, runs = _hints(raw)
    assert hints == runs and len(set(runs.values())) == 8  # exact, and each its own
    action["hint_cv"] = 0.5
    noisy, again = _hints(raw)
    assert again == runs
    assert all(noisy[a] != runs[a] for a in runs)  # off by a factor drawn per action
    assert noisy == _hints(raw)[0]  # the same hints on every run
    hinted = workload_from_dict(_workload()).with_hints(0.25)
    assert {a.hint_cv for a in hinted.action_types().values()} == {0.25}


def test_clients_hint_what_a_trajectory_still_runs_after_each_action() -> None:
    """Two 5 s runs, then a 7 s reward: with exact hints the first run has 12 s
    after it, the second 7 s, the reward none; noisy ones are off per action but
    the last stays 0, and every run sees the same."""
    raw = _workload()
    raw["tasks"][0]["reward"] = {
        "type": "score",
        "executor": "sandbox",
        "demand": {"cpu": 1},
        "duration_s": 7,
    }

    def remaining(workload: Workload) -> list[float | None]:
        policy = _HintsSeen()
        result = Simulation(workload, policy, keep_records=True).run()
        return [policy.remaining[r.id] for r in sorted(result.records, key=lambda r: r.submitted)]

    plain = workload_from_dict(raw)
    assert remaining(plain) == [None, None, None]
    assert remaining(plain.with_hints(None, 0)) == [12.0, 7.0, 0.0]
    noisy = remaining(plain.with_hints(None, 0.5))
    assert noisy[0] != 12.0 and noisy[1] != 7.0 and noisy[2] == 0.0
    assert noisy == remaining(plain.with_hints(None, 0.5))
    assert {a.hint_cv for a in plain.with_hints(None, 0.5).action_types().values()} == {None}


class _TrajectoriesSeen:
    """fifo's decisions, noting each queued action's position and what the round
    knew of its job's trajectories."""

    name = "trajectories-seen"

    def __init__(self) -> None:
        from tangram_policy.fifo import FifoPolicy

        self.inner = FifoPolicy()
        self.seen: list[tuple[int | None, TrajectoryStat | None]] = []

    def decide(self, snapshot: Snapshot) -> Decision:
        for action in snapshot.pending:
            stat = snapshot.trajectory_stats.get((action.tenant, action.job))
            self.seen.append((action.position, stat))
        return self.inner.decide(snapshot)


def test_a_trajectory_s_runs_count_by_position_and_type_once_it_has_ended() -> None:
    """Two steps of one trajectory: two 5 s runs, then a 7 s reward. The first
    step's actions are at positions 0, 1 and 2 and nothing is known yet; the
    second step's see the first trajectory's runs, counted only after it ended."""
    raw = _workload()
    raw["tasks"][0].update(steps=2)
    raw["tasks"][0]["actions"][0].update(setup_s=0, start_s=0)
    raw["tasks"][0]["reward"] = {
        "type": "score",
        "executor": "sandbox",
        "demand": {"cpu": 1},
        "duration_s": 7,
    }
    policy = _TrajectoriesSeen()
    Simulation(workload_from_dict(raw), policy).run()
    rests = {(0, "t.run"): (1, 12.0), (1, "t.run"): (1, 7.0), (2, "t.score"): (1, 0.0)}
    ended = trajectory_stat(rests)
    assert policy.seen == [(0, None), (1, None), (2, None), (0, ended), (1, ended), (2, ended)]


def test_the_bench_takes_hints_and_refuses_a_negative_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.policy import main

    path = str(WORKLOADS / "swe.yaml")
    runs = {}
    for hints in ([], ["--hints", "0"]):
        assert main([path, "--format", "json", "--policies", "fifo,tangram", *hints]) == 0
        runs[bool(hints)] = json.loads(capsys.readouterr().out)["policies"]
    assert runs[True]["fifo"] == runs[False]["fifo"]  # fifo reads no hint
    assert runs[True]["tangram"]["mean_act_s"] != runs[False]["tangram"]["mean_act_s"]
    for flag in ("--hints", "--remaining-hints"):
        with pytest.raises(SystemExit) as refused:
            main([path, flag, "-1"])
        assert refused.value.code == 2
        assert f"{flag}: expected a coefficient of variation >= 0, got -1" in (
            capsys.readouterr().err
        )


def _gpu_pairs(**task: Any) -> dict[str, Any]:
    """One host of 4 GPUs in two NVLink pairs and one task ``r`` (one step, no turns,
    10 s of thinking) with the fields ``task`` gives."""
    return _workload(
        pool=[
            {"name": "g", "count": 1, "capacity": {"gpu": 4}, "executors": ["rm"], "gpu_groups": 2}
        ],
        tasks=[{"name": "r", "steps": 1, "turns": 0, "think_s": 10, **task}],
    )


def test_gpus_split_across_interconnect_groups_run_slower() -> None:
    """4 GPUs in two NVLink pairs; a 2-GPU call of 4 s runs 2.5x as long across pairs."""
    tp = {
        "type": "tp",
        "executor": "rm",
        "demand": {"gpu": 2},
        "duration_s": 4,
        "split_gpus_slowdown": 2.5,
    }
    workload = workload_from_dict(_gpu_pairs(trajectories=1, turns=1, think_s=0, actions=[tp]))
    assert simulate(workload, _Placer(("g-0:gpu0", "g-0:gpu1"))).acts == [4.0]
    assert simulate(workload, _Placer(("g-0:gpu1", "g-0:gpu2"))).acts == [10.0]
    assert simulate(workload, "tangram").acts == [4.0]  # one pair, as topology asks


def test_a_type_said_to_split_its_gpus_is_told_to_the_policy_and_still_pays_the_split() -> None:
    """``may_split_gpus`` is what the clients tell the policy; ``split_gpus_slowdown``
    is what a split costs, told or not."""
    dp = {
        "type": "dp",
        "executor": "rm",
        "demand": {"gpu": 2},
        "duration_s": 4,
        "split_gpus_slowdown": 1.5,
        "may_split_gpus": True,
    }
    workload = workload_from_dict(_gpu_pairs(trajectories=1, turns=1, think_s=0, actions=[dp]))
    assert workload.action_types()["r.dp"].may_split_gpus
    seen: list[bool] = []

    class Split(_Placer):
        def decide(self, snapshot: Snapshot) -> Decision:
            seen.extend(action.may_split_gpus for action in snapshot.pending)
            return super().decide(snapshot)

    assert simulate(workload, Split(("g-0:gpu1", "g-0:gpu2"))).acts == [6.0]
    assert seen == [True]
    with pytest.raises(WorkloadError, match="may_split_gpus"):
        workload_from_dict(_gpu_pairs(trajectories=1, actions=[{**dp, "may_split_gpus": "yes"}]))


class _GiveBack:
    """Places the sweep on all four GPUs, then takes ``taken`` back from it for the
    call; keeps the GPUs each round saw it hold."""

    name = "give-back"

    def __init__(self, taken: str) -> None:
        self.taken = taken
        self.seen: list[tuple[tuple[str, ...], tuple[int, ...]]] = []

    def decide(self, snapshot: Snapshot) -> Decision:
        node = snapshot.nodes[0].id
        placements = []
        for a in snapshot.pending:
            if a.type == "s.sweep":
                all_four = tuple(f"g-0:gpu{i}" for i in range(4))
                placements.append(Placement(a.id, node, {"gpu": 4.0}, 4, gpus=all_four))
            else:
                placements.append(Placement(a.id, node, dict(a.demand), gpus=(self.taken,)))
        resizes = []
        for held in snapshot.resizable:
            self.seen.append((held.gpus, held.gpu_groups))
            kept = tuple(gpu for gpu in held.gpus if gpu != self.taken)
            resizes.append(Resize(held.action_id, node, {"gpu": 3.0}, 3, kept))
        return Decision(tuple(placements), tuple(resizes))


def test_a_run_that_can_give_gpus_back_pauses_and_runs_on_at_what_it_keeps() -> None:
    """A sweep of 40 GPU-seconds (parallel fraction 1) on all 4 GPUs from t = 0
    would end at 10; at t = 4 a 2 s call takes gpu3 back. The sweep has 60% of
    its work left, pauses 1 s (``shrink_gpus_s``) and runs it on 3 GPUs:
    5 + 0.6 x 40 / 3 = 13. The call starts at once: ACT 2, not 8."""
    sweep = {
        "type": "sweep",
        "executor": "rm",
        "demand": {"gpu": 1},
        "duration_s": 40,
        "elasticity": {"min_units": 1, "max_units": 4, "parallel_fraction": 1.0},
        "may_shrink_gpus": True,
        "shrink_gpus_s": 1,
    }
    call = {"type": "call", "executor": "rm", "demand": {"gpu": 1}, "duration_s": 2}
    raw = _gpu_pairs(actions=[sweep], turns=1, think_s=0, trajectories=1)
    raw["tasks"].append({**raw["tasks"][0], "name": "c", "think_s": 4, "actions": [call]})
    raw["tasks"][0]["name"] = "s"
    policy = _GiveBack("g-0:gpu3")
    result = simulate(workload_from_dict(raw), policy)
    assert sorted(result.acts) == [2.0, 13.0]
    assert policy.seen == [(("g-0:gpu0", "g-0:gpu1", "g-0:gpu2", "g-0:gpu3"), (0, 0, 1, 1))]
    # Only a GPU it holds comes back.
    with pytest.raises(PolicyError, match="resizes"):
        simulate(workload_from_dict(raw), _GiveBack("g-0:gpu9"))
    # Undeclared, the run is never offered: the call waits for the sweep to end.
    raw["tasks"][0]["actions"] = [{**sweep, "may_shrink_gpus": False}]
    assert sorted(simulate(workload_from_dict(raw), _GiveBack("g-0:gpu3")).acts) == [8.0, 10.0]
    # Only of one GPU a unit.
    raw["tasks"][0]["actions"] = [{**sweep, "demand": {"gpu": 2}}]
    with pytest.raises(WorkloadError, match="may_shrink_gpus"):
        workload_from_dict(raw)


def test_a_policy_that_names_a_gpu_already_held_is_refused() -> None:
    """Two 1-GPU calls at t = 10, both placed on g-0:gpu0: the count fits (2 of 4),
    the device does not."""
    raw = _gpu_pairs(
        trajectories=2,
        reward={"type": "score", "executor": "rm", "demand": {"gpu": 1}, "duration_s": 2},
    )
    with pytest.raises(PolicyError, match=r"takes GPUs \['g-0:gpu0'\]"):
        simulate(workload_from_dict(raw), _Placer(("g-0:gpu0",)))


class _BatchThenPair:
    """Batches the score calls queued at once on g-0:gpu0, then places any other call
    on the pair g-0:gpu2, g-0:gpu3; keeps the free GPU groups each later round saw."""

    name = "batch-then-pair"

    def __init__(self) -> None:
        self.seen: list[tuple[tuple[str, ...], ...]] = []

    def decide(self, snapshot: Snapshot) -> Decision:
        node = snapshot.nodes[0]
        scores = [a for a in snapshot.pending if a.type == "r.score"]
        if scores:
            share = {"gpu": 1.0 / len(scores)}
            return Decision(
                tuple(
                    Placement(a.id, node.id, share, batch_id="b", gpus=("g-0:gpu0",))
                    for a in scores
                )
            )
        self.seen.append(node.gpu_groups)
        return Decision(
            tuple(
                Placement(a.id, node.id, dict(a.demand), gpus=("g-0:gpu2", "g-0:gpu3"))
                for a in snapshot.pending
            )
        )


def test_a_batch_holds_its_gpu_until_it_ends() -> None:
    """Each member of a batch holds its share of the GPU's count, and the batch holds
    the GPU itself: a round during its run sees it taken.

    Two score calls at t = 10 run as one batch on gpu0 for 2 + 0.1 x 2 = 2.2 s; a
    2-GPU call comes at 11 and sees gpu1 and the pair gpu2, gpu3 free.
    """
    score = {
        "type": "score",
        "executor": "rm",
        "demand": {"gpu": 1},
        "duration_s": 2,
        "batch": {"limit": 2, "marginal": 0.1},
    }
    raw = _gpu_pairs(trajectories=2, reward=score)
    wide = {"type": "tp", "executor": "rm", "demand": {"gpu": 2}, "duration_s": 4}
    raw["tasks"].append(
        {"name": "w", "steps": 1, "trajectories": 1, "turns": 1, "think_s": 11, "actions": [wide]}
    )
    policy = _BatchThenPair()
    result = simulate(workload_from_dict(raw), policy)
    assert policy.seen == [(("g-0:gpu1",), ("g-0:gpu2", "g-0:gpu3"))]
    assert sorted(result.acts) == pytest.approx([2.2, 2.2, 4.0])


def test_the_simulator_refuses_a_policy_that_overcommits() -> None:
    with pytest.raises(PolicyError, match="takes"):
        simulate(workload_from_dict(_two_trajectories()), _Greedy())


def test_a_trace_replays_to_the_same_result(tmp_path: Path) -> None:
    workload = workload_from_dict(_reward_workload(0.1))
    result = simulate(workload, "tangram", keep_records=True)
    path = tmp_path / "trace.jsonl"
    with path.open("w") as handle:
        assert write_trace(result.records, handle) == 4
    records = list(read_trace(path))
    assert replay(records, workload, "tangram").acts == pytest.approx(result.acts)
    assert sorted(replay(records, workload, "fifo").acts) == pytest.approx([2, 4, 6, 8])
    with pytest.raises(ValueError, match="static"):
        replay(records, workload, "static")


def test_the_bench_prints_json_for_every_policy() -> None:
    from bench.policy import main

    out = io.StringIO()
    path = str(WORKLOADS / "swe.yaml")
    with redirect_stdout(out):
        assert main([path, "--seeds", "1", "--format", "json", "--policies", "fifo,tangram"]) == 0
    report = json.loads(out.getvalue())
    for name in ("fifo", "tangram"):
        metrics = report["policies"][name]
        for key in (
            "mean_act_s",
            "p50_act_s",
            "p95_act_s",
            "p99_act_s",
            "mean_step_s",
            "resource_hours",
            "utilisation",
        ):
            assert key in metrics
    assert report["ratios"]["tangram_vs_fifo"]["mean_act"] > 1.0


def test_the_round_bench_prints_its_rounds_and_the_interpreter_that_ran_them() -> None:
    """``bench.round`` on a small state: both views place alike, and the last line
    names the interpreter, by which its milliseconds are read (bench/README.md,
    "The interpreter")."""
    from bench.round import main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--pending", "300", "--nodes", "30", "--running", "60", "--repeat", "1"]) == 0
    lines = out.getvalue().splitlines()
    rows = {line[:40].strip(): line.split() for line in lines if line.startswith("tangram")}
    placed = {int(row[-2]) for row in rows.values()}
    assert set(rows) == {"tangram", "tangram (every running action)"}
    assert len(placed) == 1 and placed.pop() > 0
    interpreter = lines[-1]
    assert interpreter.startswith(f"interpreter: Python {platform.python_version()} at /")
    assert interpreter.endswith(("a shared libpython", "the interpreter in its executable"))


def test_the_bench_gives_each_tenant_its_mean_act() -> None:
    """Pooled and per tenant from the same actions: the tenants' means, weighted by
    their actions, give the pooled mean; the table prints a row of them per policy."""
    from bench.policy import aggregate, table

    workload = load_workload(WORKLOADS / "protect.yaml")
    results = [simulate(workload.with_seed(seed), "fifo") for seed in (1, 2)]
    metrics = aggregate(results)
    by_tenant = metrics["mean_act_by_tenant_s"]
    assert set(by_tenant) == {"team-big", "team-small"}
    counts = {
        tenant: sum(row["actions"] for row in metrics["by_type"] if row["tenant"] == tenant)
        for tenant in by_tenant
    }
    assert sum(counts.values()) == metrics["actions"]
    pooled = sum(by_tenant[t] * counts[t] for t in by_tenant) / sum(counts.values())
    assert pooled == pytest.approx(metrics["mean_act_s"])
    assert by_tenant["team-big"] > by_tenant["team-small"]  # 8-core ~30 s jobs, ~4 s calls
    report = {"workload": "protect", "seeds": [1, 2], "policies": {"fifo": metrics}}
    lines = table({**report, "ratios": {}, "wall_s": 0.0}).splitlines()
    header = lines.index(next(line for line in lines if line.startswith("mean ACT by tenant")))
    assert lines[header].split()[-2:] == ["team-big", "team-small"]
    assert lines[header + 1].split() == [
        "fifo",
        f"{by_tenant['team-big']:.2f}",
        f"{by_tenant['team-small']:.2f}",
    ]


def test_the_bench_prints_the_guarantee_each_tenant_went_without() -> None:
    """Mean over seeds, per tenant and kind, and a row of them per policy."""
    from bench.policy import aggregate, table

    workload = workload_from_dict(_lending({}))
    metrics = aggregate([simulate(workload.with_seed(seed), "fifo") for seed in (1, 2)])
    assert _flat(metrics["guarantee_shortfall_unit_s"]) == pytest.approx({("a", "cpu"): 9.0})
    report = {"workload": "lending", "seeds": [1, 2], "policies": {"fifo": metrics}}
    lines = table({**report, "ratios": {}, "wall_s": 0.0}).splitlines()
    header = lines.index(next(line for line in lines if line.startswith("guarantee short")))
    assert lines[header].split()[-1] == "a"
    assert lines[header + 1].split() == ["fifo", "cpu", "9"]


def test_the_bench_tells_where_each_type_s_act_went() -> None:
    """``--by-type``: per action type, its mean ACT, the wait in it, and the units it
    ended on; the types' means, weighted by their actions, give the pooled mean."""
    from bench.policy import aggregate, table

    workload = load_workload(WORKLOADS / "swe.yaml")
    report: dict[str, Any] = {"workload": "swe", "seeds": [1], "ratios": {}, "wall_s": 0.0}
    report["policies"] = {
        name: aggregate([simulate(workload.with_seed(1), name)]) for name in ("static", "tangram")
    }
    for metrics in report["policies"].values():
        rows = metrics["by_type"]
        assert sum(row["actions"] for row in rows) == metrics["actions"]
        pooled = sum(row["mean_act_s"] * row["actions"] for row in rows) / metrics["actions"]
        assert pooled == pytest.approx(metrics["mean_act_s"])
        assert all(0 <= row["mean_wait_s"] <= row["mean_act_s"] for row in rows)
    static = {row["type"]: row for row in report["policies"]["static"]["by_type"]}
    tangram = {row["type"]: row for row in report["policies"]["tangram"]["by_type"]}
    assert set(static) == set(tangram)
    assert all(row["mean_units"] == 1 for row in static.values())  # static never scales
    assert max(row["mean_units"] for row in tangram.values()) > 1  # swe's tests are elastic
    assert sum(row["mean_wait_s"] for row in static.values()) > 0  # its sandbox queue
    lines = table(report, by_type=True).splitlines()
    assert not any(line.startswith("mean ACT / wait") for line in table(report).splitlines())
    first = lines.index(next(line for line in lines if line.startswith("mean ACT / wait")))
    shown = lines[first + 1 : first + 1 + len(static)]
    assert [line.split()[1] for line in shown] == sorted(static)
    assert all(f"x{tangram[line.split()[1]]['mean_units']:.2f}" in line for line in shown)


def test_the_bench_tells_each_step_s_act_where_a_cold_start_shows_in_the_first() -> None:
    """``--by-step``: per action type and step of its task; the steps' rows add up
    to the type's, and rm's 90 s model load falls on its first step alone."""
    from bench.policy import aggregate, table

    workload = load_workload(WORKLOADS / "rm.yaml")
    report: dict[str, Any] = {"workload": "rm", "seeds": [1, 2], "ratios": {}, "wall_s": 0.0}
    report["policies"] = {
        name: aggregate([simulate(workload.with_seed(seed), name) for seed in (1, 2)])
        for name in ("fifo", "tangram")
    }
    for metrics in report["policies"].values():
        (by_type,) = metrics["by_type"]
        steps = metrics["by_step"]
        assert [row["step"] for row in steps] == [1, 2, 3, 4]
        assert {row["type"] for row in steps} == {by_type["type"]}
        assert [row["actions"] for row in steps] == [2 * 512] * 4
        pooled = sum(row["mean_act_s"] * row["actions"] for row in steps) / metrics["actions"]
        assert pooled == pytest.approx(by_type["mean_act_s"])
        first, *rest = (row["mean_wait_s"] for row in steps)
        assert first > 60 + max(rest)  # most of the load is waited for, in step 1 only
    lines = table(report, by_step=True).splitlines()
    header = lines.index(next(line for line in lines if line.startswith("mean ACT / wait")))
    assert lines[header].split()[-3:] == ["step", "fifo", "tangram"]
    shown = lines[header + 1 : header + 5]
    tangram = report["policies"]["tangram"]["by_step"]
    assert [line.split()[:4] for line in shown] == [
        ["team-rm", "rm.score", "step", str(step)] for step in (1, 2, 3, 4)
    ]
    assert all(f"{row['mean_act_s']:.2f}" in line for row, line in zip(tangram, shown, strict=True))


def test_a_run_that_gets_stuck_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Static's sandbox counts against the tenant's 1-core limit while its reward,
    which needs a core too, waits: the bench names the action, tenant and limit."""
    from bench.policy import main

    raw = _workload(
        tenants=[{"name": "team", "guaranteed": {"cpu": 1}, "limit": {"cpu": 1}}],
    )
    raw["pool"].append(
        {"name": "gpu", "count": 1, "capacity": {"gpu": 1, "cpu": 1}, "executors": ["rm"]}
    )
    task = raw["tasks"][0]
    task.update(tenant="team", turns=1)
    task["reward"] = {
        "type": "score",
        "executor": "rm",
        "binding": "task",
        "demand": {"gpu": 1, "cpu": 1},
        "duration_s": 1,
    }
    assert simulate(workload_from_dict(raw), "fifo").acts  # action-level: it finishes
    with pytest.raises(PolicyError, match=r"t\.score, tenant team.*limit \{'cpu': 1\.0\}"):
        simulate(workload_from_dict(raw), "static")
    path = tmp_path / "stuck.yaml"
    path.write_text(json.dumps(raw))  # JSON is YAML
    assert main([str(path), "--policies", "static,tangram", "--jobs", "1"]) == 1
    assert "tiny, seed 1: static: 1 actions never placed" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(path.stem for path in WORKLOADS.glob("*.yaml")))
def test_shipped_workloads_load(name: str) -> None:
    workload = load_workload(WORKLOADS / f"{name}.yaml")
    assert workload.tasks and workload.pool


def test_a_perturbed_variant_scales_each_number_by_its_factor() -> None:
    from bench.perturb import variant

    workload = workload_from_dict(_workload())
    factors = {"pool": 2.0, "trajectories": 3.0, "think": 0.5, "duration": 1.5, "setup": 0.25}
    changed = variant(workload, factors, "v")
    (task,), (action,) = changed.tasks, changed.tasks[0].actions
    assert changed.name == "v" and changed.pool[0].count == 2.0
    assert (task.trajectories, task.think_s.value) == (3, 5.0)
    assert (action.duration_s.value, action.setup_s) == (7.5, 1.0)
    assert action.start_s == workload.tasks[0].actions[0].start_s  # not perturbed


def test_the_perturbation_bench_judges_each_variant(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.perturb import main

    code = main([str(WORKLOADS / "swe.yaml"), "--variants", "2", "--seeds", "1", "--jobs", "1"])
    out = capsys.readouterr().out
    assert out.count("swe-") == 2 and "of 2 workloads meet every target" in out
    assert "pool x" in out and code in (0, 1)
    again = main([str(WORKLOADS / "swe.yaml"), "--variants", "2", "--seeds", "1", "--jobs", "1"])
    assert capsys.readouterr().out == out and again == code  # the same seed, the same variants


def test_the_pools_bench_judges_tangram_on_each_scaled_pool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.pools import main

    path = str(WORKLOADS / "swe.yaml")
    assert main([path, "--scales", "0.5,1", "--seeds", "1", "--jobs", "1"]) == 0
    rows = [row.split() for row in capsys.readouterr().out.splitlines() if row.startswith("swe")]
    assert [row[1] for row in rows] == ["0.5", "1"]
    swe = load_workload(path)
    for row, scale in zip(rows, (0.5, 1.0), strict=True):
        acts = {
            policy: simulate(swe.scaled(scale).with_seed(1), policy).acts
            for policy in ("fifo", "tangram")
        }
        fifo, tangram = (sum(acts[p]) / len(acts[p]) for p in ("fifo", "tangram"))
        assert row[2] == f"{fifo / tangram:.2f}"  # baseline / tangram, on that pool
    for bad in ("x", "0.5,0"):
        with pytest.raises(SystemExit) as exited:
            main([path, "--scales", bad])
        assert exited.value.code == 2 and "--scales" in capsys.readouterr().err


def test_the_pools_bench_scales_one_other_factor_and_can_decide_on_a_timer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.perturb import variant
    from bench.pools import main

    path = str(WORKLOADS / "swe.yaml")
    argv = [path, "--factor", "think", "--scales", "0.5", "--round-interval", "2"]
    assert main([*argv, "--seeds", "1", "--jobs", "1"]) == 0
    timer, told, _, row = capsys.readouterr().out.splitlines()[:4]
    assert timer == "one round at most every 2 s"
    assert told == "each scale multiplies the LLM think times; the pool is as written"
    factors = {"pool": 1.0, "trajectories": 1.0, "think": 0.5, "duration": 1.0, "setup": 1.0}
    busier = replace(variant(load_workload(path), factors, "swe"), round_interval_s=2.0)
    fifo, tangram = (simulate(busier.with_seed(1), policy).acts for policy in ("fifo", "tangram"))
    assert row.split()[2] == f"{sum(fifo) / len(fifo) / (sum(tangram) / len(tangram)):.2f}"
    for bad in (["--factor", "turns"], ["--round-interval", "-1"]):
        with pytest.raises(SystemExit) as exited:
            main([path, *bad])
        assert exited.value.code == 2 and bad[0] in capsys.readouterr().err


def test_the_pools_bench_says_which_baseline_a_pool_leaves_stuck(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two tasks on two cores: partitioned gives each one core, and the second
    task's two-core action never runs there; fifo and tangram run both."""
    from bench.pools import main

    raw = _workload()
    raw["pool"][0]["capacity"] = {"cpu": 2}
    wide = json.loads(json.dumps(raw["tasks"][0]))
    wide["name"], wide["actions"][0]["demand"] = "wide", {"cpu": 2}
    raw["tasks"].append(wide)
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(raw))  # JSON is YAML
    assert main([str(path), "--scales", "1", "--seeds", "1", "--jobs", "1"]) == 0
    (row,) = [row.split() for row in capsys.readouterr().out.splitlines() if row.startswith("tiny")]
    assert row[4] == row[7] == "stuck" and row[2] != "stuck"  # "1.00 (1.00)" is two fields


def test_unseen_workloads_are_valid_and_depend_only_on_the_seed() -> None:
    import random

    from bench.unseen import draw_workload

    for seed in range(200):
        raw = draw_workload(random.Random(seed), f"u{seed}")
        assert raw == draw_workload(random.Random(seed), f"u{seed}")
        workload = workload_from_dict(raw)  # the format's checks: every action runs somewhere
        assert 1 <= len(workload.tasks) <= 4
        assert {task.tenant for task in workload.tasks} <= set(workload.quotas)


def test_the_unseen_summary_counts_wins_pooled_and_on_every_seed() -> None:
    """A draw ahead pooled but behind on one seed counts once, not twice; each worst
    is named, pooled and on a seed; a stuck run is counted apart."""
    from bench.unseen import beaten

    def row(name: str, fifo: list[float]) -> dict[str, Any]:
        return {"workload": name, "act_vs_fifo": fifo}

    rows = [row("a", [1.20, 1.10]), row("b", [1.05, 0.97]), row("c", [1.10, 1.08])]
    rows += [{"workload": "d", "error": "stuck"}]
    lines = beaten(
        [{**r, "act_vs_partitioned": [2.0, 2.0], "act_vs_static": [3.0, 3.0]} for r in rows]
    ).splitlines()
    assert lines[0] == (
        "ACT vs fifo         better on 3 of 3 (2 on every seed); geometric mean 1.11x;"
        " worst 1.05x (b), on a seed 0.97x (b)"
    )
    assert lines[-1] == "1 runs got stuck"


def test_the_unseen_bench_judges_each_workload_and_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.unseen import main

    argv = ["--count", "2", "--seed", "3", "--seeds", "1", "--jobs", "1", "--keep", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = [row for row in out.splitlines() if row.startswith("unseen-3-")]
    assert len(rows) == 2 and "of 2 workloads meet every target" in out
    assert "ACT vs fifo         better on" in out
    kept = sorted(tmp_path.glob("*.yaml"))
    assert [path.stem for path in kept] == ["unseen-3-0", "unseen-3-1"]
    assert all(load_workload(path).tasks for path in kept)
    main(argv)
    assert capsys.readouterr().out == out
    for changed in (["--hints", "0"], ["--round-interval", "5"]):  # the runs, not the draws
        main([*argv, *changed])
        assert capsys.readouterr().out != out
        assert [p.stem for p in sorted(tmp_path.glob("*.yaml"))] == ["unseen-3-0", "unseen-3-1"]
    for bad in ("x", "0.5,0.2", "0,1"):
        with pytest.raises(SystemExit) as exited:
            main(["--pool-share", bad])
        assert exited.value.code == 2 and "--pool-share" in capsys.readouterr().err
    for flag, bad in (
        ("--require", "offline,gpu"),
        ("--min-tenants", "4"),
        ("--split-slowdown", "0.8,2"),
        ("--split-slowdown", "2,1.5"),
        ("--hints", "-0.1"),
        ("--remaining-hints", "-1"),
        ("--round-interval", "-1"),
        ("--declare-splits", "1.5"),
        ("--shrink-gpus", "-1,5"),
        ("--shrink-gpus", "9"),
    ):
        with pytest.raises(SystemExit) as exited:
            main([flag, bad])
        assert exited.value.code == 2 and flag in capsys.readouterr().err


def test_unseen_split_slowdowns_go_only_to_multi_gpu_types_and_change_nothing_else() -> None:
    """``--split-slowdown`` draws from a stream of its own: without its factors a
    workload is the plain draw, and only a type that may hold two GPUs or more gets one,
    declaring ``may_split_gpus`` where its factor is at most ``--declare-splits``."""
    import copy
    import random

    from bench.unseen import draw_split_slowdowns, draw_workload

    given = declared_count = 0
    for seed in range(80):
        raw = draw_workload(random.Random(seed), f"u{seed}")
        slowed = copy.deepcopy(raw)
        draw_split_slowdowns(slowed, random.Random(f"split:u{seed}"), (1.2, 2.0), 1.6)
        workload_from_dict(copy.deepcopy(slowed))
        for task in slowed["tasks"]:
            for call in [*task.get("actions", ()), *([task["reward"]] if "reward" in task else ())]:
                factor = call.pop("split_gpus_slowdown", None)
                declared = call.pop("may_split_gpus", False)
                assert declared == (factor is not None and factor <= 1.6), call
                declared_count += declared
                elasticity = call.get("elasticity", {})
                most = call["demand"].get("gpu", 0)
                if elasticity.get("unit_kind") == "gpu":
                    most = most * elasticity["max_units"] / elasticity["min_units"]
                assert (factor is not None) == (most > 1), call
                if factor is not None:
                    assert 1.2 <= factor <= 2.0
                    given += 1
        assert slowed == raw
    assert given > 5  # the seeds draw multi-GPU judges and jobs
    assert 0 < declared_count < given


def test_unseen_gpu_shrinks_go_only_to_offline_gpu_jobs_and_change_nothing_else() -> None:
    """``--shrink-gpus`` declares ``may_shrink_gpus`` on each offline job elastic in
    GPUs, with a pause drawn from a stream of its own, and nothing else."""
    import copy
    import random

    from bench.unseen import draw_gpu_shrinks, draw_workload

    declared = 0
    for seed in range(80):
        raw = draw_workload(random.Random(seed), f"u{seed}")
        shrinking = copy.deepcopy(raw)
        draw_gpu_shrinks(shrinking, random.Random(f"shrink:u{seed}"), (5.0, 30.0))
        workload_from_dict(copy.deepcopy(shrinking))
        for task in shrinking["tasks"]:
            for call in [*task.get("actions", ()), *([task["reward"]] if "reward" in task else ())]:
                pause = call.pop("shrink_gpus_s", None)
                if call.pop("may_shrink_gpus", False):
                    assert call["type"] == "job" and call["elasticity"]["unit_kind"] == "gpu"
                    assert pause is not None and 5.0 <= pause <= 30.0
                    declared += 1
                else:
                    assert pause is None
                    assert call["type"] != "job" or call["elasticity"]["unit_kind"] != "gpu"
        assert shrinking == raw
    assert declared > 3  # the seeds draw offline GPU jobs


def test_the_unseen_bench_judges_only_the_family_it_is_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--require`` and ``--min-tenants`` skip draws, never change them: the
    workloads judged are the same seed's unfiltered draws of those names."""
    import random

    from bench.unseen import draw_workload, main

    rng = random.Random(5)
    drawn = [draw_workload(rng, f"unseen-5-{number}") for number in range(12)]
    wanted = [
        raw["name"]
        for raw in drawn
        if "interpreter" in {task["name"] for task in raw["tasks"]} and len(raw["tenants"]) >= 2
    ]
    assert 0 < len(wanted) < 12  # the seed draws both kinds
    argv = ["--count", "12", "--seed", "5", "--seeds", "1", "--jobs", "1", "--keep", str(tmp_path)]
    assert main([*argv, "--require", "interpreter", "--min-tenants", "2"]) == 0
    out = capsys.readouterr().out
    assert [row.split()[0] for row in out.splitlines() if row.startswith("unseen-5-")] == wanted
    assert f"judged {len(wanted)} of 12 draws" in out
    assert sorted(path.stem for path in tmp_path.glob("*.yaml")) == sorted(wanted)
    for path in tmp_path.glob("*.yaml"):
        assert yaml.safe_load(path.read_text()) == next(r for r in drawn if r["name"] == path.stem)


def test_the_targets_bench_gives_each_workload_its_verdict(tmp_path: Path) -> None:
    """A workload where tangram has nothing to gain over fifo misses targets, and says which."""
    from bench.targets import main

    out = io.StringIO()
    path = tmp_path / "plain.yaml"
    path.write_text(json.dumps(_workload()))
    with redirect_stdout(out):
        code = main([str(WORKLOADS / "swe.yaml"), str(path), "--seeds", "1", "--format", "json"])
    report = json.loads(out.getvalue())
    swe, plain = report["workloads"]
    assert swe["act_vs_static"][0] > 4.0 and swe["savings_pct"] > 0
    # No policy beats the no-wait floor, so none passes what static over it bounds.
    assert swe["act_bound"][0] >= swe["act_vs_static"][0] > 0
    assert swe["step_bound"][1] >= swe["step_vs_static"][1] > 0
    assert "ACT not better than fifo" in plain["missed"]
    # One trajectory never waits for its sandbox: static is 1.25x the floor (its setup).
    assert plain["act_bound"][0] < 5.0
    assert "ACT vs static < 5x (unreachable)" in plain["missed"]
    assert code == 1


def test_a_loss_to_fifo_says_what_each_kept_guaranteed_tenants_short_of(tmp_path: Path) -> None:
    """The lender of ``_lending`` waits 9 s for a borrowed core under both policies."""
    from bench.targets import main

    out = io.StringIO()
    path = tmp_path / "lending.yaml"
    path.write_text(json.dumps(_lending({})))
    with redirect_stdout(out):
        main([str(path), "--seeds", "1", "--no-savings", "--format", "json"])
    (row,) = json.loads(out.getvalue())["workloads"]
    wanted = "ACT not better than fifo (guarantees short, unit-s: fifo cpu 9; tangram cpu 9)"
    assert wanted in row["missed"]


def test_the_sensitivity_bench_runs_each_variant_against_the_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.sensitivity import main

    path = str(WORKLOADS / "swe.yaml")
    argv = [path, "--vary", "aging_rate=0.25,2", "--seeds", "1", "--jobs", "1"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    act = next(line.split() for line in lines if line.startswith("swe"))
    # the default's mean ACT, then default / variant: 0.25 is the default itself
    assert act[2] == "1.000" and act[3] != "1.000"
    with pytest.raises(SystemExit) as refused:
        main([path, "--vary", "elastic=0"])
    assert refused.value.code == 2
    assert "--vary: 'elastic' is not a numeric setting" in capsys.readouterr().err
