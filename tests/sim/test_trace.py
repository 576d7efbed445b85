"""Traces: the closed-loop replay by hand, open loop without trajectories, a faithful round trip."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from tangram_sim.sim import ActionRecord, simulate
from tangram_sim.trace import read_trace, replay, trace_arrivals, write_trace
from tangram_sim.workload import Workload, workload_from_dict

WORKLOADS = Path(__file__).resolve().parents[2] / "fixtures" / "workloads"


def _one_node() -> Workload:
    return workload_from_dict(
        {
            "name": "one-node",
            "pool": [{"name": "cpu", "count": 1, "capacity": {"cpu": 1}, "executors": ["sandbox"]}],
            "tasks": [
                {
                    "name": "t",
                    "steps": 1,
                    "trajectories": 1,
                    "turns": 1,
                    "actions": [
                        {
                            "type": "run",
                            "executor": "sandbox",
                            "demand": {"cpu": 1},
                            "duration_s": 1,
                        }
                    ],
                }
            ],
        }
    )


def _line(id: str, submitted: float, finished: float, base_s: float, trajectory: str = "") -> Any:
    return ActionRecord(
        id, "default", "t.run", submitted, submitted, finished, "cpu-0", 1, base_s, trajectory
    )


def _hand_trace() -> list[ActionRecord]:
    # Recorded alone on the node: x1 ran 0.5-5.5, the LLM thought 3 s, x2 ran 8.5-10.5.
    # The replay adds b, which holds the node 0-4 and so delays x1.
    return [
        _line("b", 0.0, 4.0, 4.0),
        _line("x1", 0.5, 5.5, 5.0, trajectory="x"),
        _line("x2", 8.5, 10.5, 2.0, trajectory="x"),
    ]


def _times(records: list[ActionRecord]) -> dict[str, tuple[float, float, float]]:
    return {r.id: (r.submitted, r.started, r.finished) for r in records}


def _assert_times(records: list[ActionRecord], expected: dict[str, tuple[float, ...]]) -> None:
    """Submitted, started and finished of every action, to rounding."""
    times = _times(records)
    assert times.keys() == expected.keys()
    for action_id, want in expected.items():
        assert times[action_id] == pytest.approx(want, abs=1e-9), action_id


def test_a_trajectory_replays_closed_loop_by_hand() -> None:
    result = replay(_hand_trace(), _one_node(), "fifo")
    # x1 waits for b (runs 4-9); x2 arrives at x1's replayed finish + the 3 s gap: 12.
    _assert_times(result.records, {"b": (0, 0, 4), "x1": (0.5, 4, 9), "x2": (12, 12, 14)})
    assert {r.id: r.trajectory for r in result.records} == {"b": "", "x1": "x", "x2": "x"}
    assert result.summary()["makespan_s"] == pytest.approx(14)


def test_lines_without_a_trajectory_replay_open_loop() -> None:
    lines = [dataclasses.replace(r, trajectory="") for r in _hand_trace()]
    result = replay(lines, _one_node(), "fifo")
    # x2 arrives at its recorded 8.5, whatever happened to x1, and waits for it.
    _assert_times(result.records, {"b": (0, 0, 4), "x1": (0.5, 4, 9), "x2": (8.5, 9, 11)})


def test_an_action_waits_on_what_had_finished_when_it_was_submitted() -> None:
    lines = [
        _line("p1", 0.0, 5.0, 5.0, trajectory="x"),
        _line("p2", 1.0, 3.0, 2.0, trajectory="x"),  # a parallel call: p1 still ran
        _line("p3", 7.0, 8.0, 1.0, trajectory="x"),  # after both: p1 finished last
        _line("q1", 4.0, 6.0, 2.0, trajectory="y"),  # another trajectory: its own chain
    ]
    waits = {a.id: (a.after, a.think_s) for a in trace_arrivals(lines)}
    assert waits == {"p1": ("", 0), "p2": ("", 0), "p3": ("p1", 2.0), "q1": ("", 0)}


def _small_mixed() -> Workload:
    raw = yaml.safe_load((WORKLOADS / "mixed.yaml").read_text())
    for task in raw["tasks"]:
        task["trajectories"] = max(4, task["trajectories"] // 16)
        task["steps"] = 2
    return workload_from_dict(raw)


def test_a_recorded_run_replays_to_the_same_actions(tmp_path: Path) -> None:
    workload = _small_mixed()
    recorded = simulate(workload, "tangram", keep_records=True)
    path = tmp_path / "mixed.jsonl"
    with path.open("w") as handle:
        write_trace(recorded.records, handle)
    lines = list(read_trace(path))
    assert {r.trajectory.split("/")[0] for r in lines} == {"math", "swe", "rm"}
    assert any(r.units > 1 for r in lines)
    replayed = replay(lines, workload, "tangram")
    # Same policy, same arrivals: every action is submitted, started and finished as
    # recorded (a think time is rebuilt as finish + (submit - finish), exact to rounding).
    _assert_times(replayed.records, _times(recorded.records))
    assert sorted(replayed.acts) == pytest.approx(sorted(recorded.acts), abs=1e-9)


def test_a_trace_the_workload_cannot_replay_is_refused() -> None:
    workload = _one_node()
    with pytest.raises(ValueError, match="'t.other' is not in one-node"):
        replay([dataclasses.replace(_hand_trace()[0], type="t.other")], workload, "fifo")
    with pytest.raises(ValueError, match="'x1': a line with a trajectory needs 'finished'"):
        replay([_line("x1", 0.0, -1.0, 1.0, trajectory="x")], workload, "fifo")
    with pytest.raises(ValueError, match="'b' appears twice"):
        replay([_hand_trace()[0], _hand_trace()[0]], workload, "fifo")
    with pytest.raises(ValueError, match="whole life"):
        replay(_hand_trace(), workload, "static")
