"""A live run exported as a trace: relative times, base_s at minimum units, trajectories,
the simulator replaying it, and the command's refusals."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F

from apps.actions.models import Action
from apps.actions.services import action_cancel, action_mark_started, action_record_result
from apps.scheduling.services import schedule_round
from tangram_sim.trace import read_trace, replay
from tangram_sim.workload import workload_from_dict
from tests.factories import succeeded_result

pytestmark = pytest.mark.django_db

URL = "/api/v1/actions"
ELASTIC = {"min_units": 1, "max_units": 4, "parallel_fraction": 0.95, "unit_kind": "cpu"}


def _submit(caller, **fields) -> Action:
    body = {"type": "sleep", "payload": {"seconds": 0}, "demand": {"cpu": 1, "memory": 16}}
    response = caller.client.post(URL, {**body, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return Action.objects.get(pk=response.json()["id"])


def _run(action: Action, *, started: float, finished: float) -> Action:
    """Place the action through a real round, then report it as an agent does."""
    schedule_round()
    action.refresh_from_db()
    assert action.node is not None
    node_id = action.node_id
    assert action_mark_started(
        node_id=node_id, action_id=str(action.pk), attempt=action.attempt, started_at=started
    )
    assert action_record_result(
        node_id=node_id,
        result=succeeded_result(
            action.pk, action.attempt, started_at=started, finished_at=finished
        ),
    )
    action.refresh_from_db()
    return action


def _live_job(owner, stranger) -> tuple[Action, Action]:
    """Job j: an elastic action, then (same trajectory) a rigid one; around it, what a
    trace leaves out or filters: a cancelled action, a queued one, another tenant's job j."""
    first = _submit(owner, job="j", trajectory="t1", elasticity=ELASTIC, duration_hint_s=60)
    # As if the run began 10 s ago: the first action finishes before the second is
    # submitted (the LLM's think time lies between) without the test sleeping.
    Action.objects.filter(pk=first.pk).update(
        submitted_at=F("submitted_at") - timedelta(seconds=10)
    )
    first.refresh_from_db()
    t0 = first.submitted_at.timestamp()
    first = _run(first, started=t0 + 1.0, finished=t0 + 3.0)
    assert first.units > 1
    action_cancel(action=_submit(owner, job="j", trajectory="t2"))
    second = _submit(owner, job="j", trajectory="t1")
    s0 = second.submitted_at.timestamp()
    second = _run(second, started=s0 + 0.5, finished=s0 + 2.0)
    theirs = _submit(stranger, job="j", trajectory="t1")
    _run(theirs, started=time.time(), finished=time.time() + 1.0)
    _submit(owner, job="j", trajectory="t3")
    return first, second


def test_export_writes_relative_times_base_s_and_trajectories(
    owner, stranger, node, settings, tmp_path: Path
):
    settings.TANGRAM_POLICY = "tangram"
    first, second = _live_job(owner, stranger)
    path = tmp_path / "j.jsonl"
    call_command("tangram_trace", str(path), "--job", "j", "--tenant", "owner")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["id"] for line in lines] == [str(first.pk), str(second.pk)]
    gap = (second.submitted_at - first.submitted_at).total_seconds()
    one, two = lines
    assert (one["tenant"], one["type"], one["node"], one["trajectory"]) == (
        "owner",
        "j.sleep",
        "node-a",
        "j/t1",
    )
    assert (one["submitted"], one["started"], one["finished"]) == pytest.approx(
        (0.0, 1.0, 3.0), abs=1e-5
    )
    # 2 s on `units` cores of an Amdahl-0.95 action: 2 x speedup at minimum units.
    assert one["units"] == first.units
    assert one["base_s"] == pytest.approx(2.0 / (0.05 + 0.95 / first.units), abs=1e-4)
    assert (two["submitted"], two["started"], two["finished"]) == pytest.approx(
        (gap, gap + 0.5, gap + 2.0), abs=1e-5
    )
    assert (two["units"], two["base_s"], two["trajectory"]) == (1, pytest.approx(1.5), "j/t1")
    call_command("tangram_trace", str(path), "--job", "j")
    assert {r.tenant for r in read_trace(path)} == {"owner", "stranger"}


def test_the_simulator_replays_an_exported_run_closed_loop(
    owner, stranger, node, settings, tmp_path: Path
):
    settings.TANGRAM_POLICY = "tangram"
    first, second = _live_job(owner, stranger)
    path = tmp_path / "j.jsonl"
    call_command("tangram_trace", str(path), "--job", "j", "--tenant", "owner", "--task", "live")
    workload = workload_from_dict(
        {
            "name": "live",
            "pool": [{"name": "n", "capacity": {"cpu": 4, "memory": 8192}, "executors": ["sleep"]}],
            "tasks": [
                {
                    "name": "live",
                    "tenant": "owner",
                    "steps": 1,
                    "trajectories": 1,
                    "turns": 1,
                    "actions": [
                        {
                            "type": "sleep",
                            "executor": "sleep",
                            "demand": {"cpu": 1, "memory": 16},
                            "elasticity": ELASTIC,
                            "duration_s": 1,
                        }
                    ],
                }
            ],
        }
    )
    result = replay(list(read_trace(path)), workload, "fifo")
    replayed = {r.id: r for r in result.records}
    one, two = replayed[str(first.pk)], replayed[str(second.pk)]
    # fifo runs the elastic action on one core: its whole work at minimum units.
    base_s = 2.0 / (0.05 + 0.95 / first.units)
    assert (one.type, one.units, one.finished) == ("live.sleep", 1, pytest.approx(base_s, abs=1e-4))
    # The LLM's think time between them, as recorded, after the replayed finish.
    think_s = (second.submitted_at - first.submitted_at).total_seconds() - 3.0
    assert think_s > 6
    assert two.submitted == pytest.approx(base_s + think_s, abs=1e-4)


def test_bad_arguments_are_refused_naming_what_is_wrong(owner, node, tmp_path: Path):
    out = str(tmp_path / "out.jsonl")
    with pytest.raises(CommandError, match="--tenant: No tenant named 'nobody'"):
        call_command("tangram_trace", out, "--tenant", "nobody")
    with pytest.raises(CommandError, match="No finished actions at all"):
        call_command("tangram_trace", out)
    jobless = _submit(owner, trajectory="t")
    _run(jobless, started=time.time(), finished=time.time() + 1.0)
    with pytest.raises(CommandError, match="No finished actions for job nope"):
        call_command("tangram_trace", out, "--job", "nope")
    with pytest.raises(CommandError, match="--since: expected an ISO 8601 time"):
        call_command("tangram_trace", out, "--since", "yesterday")
    with pytest.raises(CommandError, match="No finished actions for tenant owner; since 2999"):
        call_command("tangram_trace", out, "--tenant", "owner", "--since", "2999-01-01T00:00")
    with pytest.raises(CommandError, match=f"--task: Action {jobless.pk} has no job"):
        call_command("tangram_trace", out)
    call_command("tangram_trace", out, "--task", "adhoc")
    [line] = read_trace(out)
    assert (line.type, line.trajectory) == ("adhoc.sleep", "/t")
    assert not Path(tmp_path / "never.jsonl").exists()
