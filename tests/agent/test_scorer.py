"""``reward.python``: a batch's members gathered by the agent and scored in one real sandbox run."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tangram_agent import batches
from tangram_agent.executors import Executor, Sandbox, ScorerExecutor, SleepExecutor
from tests.agent.conftest import make_assignment, needs_bwrap, sandbox_processes
from tests.agent.harness import FakeServer, arun, running_agent, sleep_assignment, until

pytestmark = needs_bwrap

#: Scores each sample x 10, and says which run scored it and how many samples that run had.
SCORER = """\
import os, uuid
RUN = uuid.uuid4().hex
def score(samples):
    print("scoring", len(samples), "on", os.environ["TANGRAM_CPUS"], "cpus")
    return [{"score": s * 10, "run": RUN, "of": len(samples)} for s in samples]
"""


def member(action_id: str, sample: Any, *, code: str = SCORER, size: int = 3) -> dict[str, Any]:
    assignment = make_assignment(code, type="reward.python", action_id=action_id, sample=sample)
    assignment.update(batch_id="batch:s1" if size > 1 else None, batch_size=size)
    return assignment


async def results(server: FakeServer, count: int, timeout: float = 20) -> dict[str, dict[str, Any]]:
    got = {}
    for _ in range(count):
        result = await server.next("result", timeout=timeout)
        got[result["action"]] = result
        await server.ack(result)
    return got


def scorer_agent(sandbox: Sandbox) -> Any:
    executors: dict[str, Executor] = {"reward.python": ScorerExecutor(sandbox)}
    return running_agent(executors=executors)


def test_a_batch_is_scored_in_one_run_with_the_whole_allocation(sandbox: Sandbox) -> None:
    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, agent):
            await server.next("register")
            for i in (1, 2, 3):
                await server.send({"type": "assign", "action": member(f"s{i}", i)})
            got = await results(server, 3)
            scores = {}
            for action_id, result in got.items():
                assert result["state"] == "succeeded", result
                scores[action_id] = json.loads(result["stdout"])
                # The scorer's prints go to stderr: one run, 3 samples, 1 core x 3 members.
                assert result["stderr"].strip() == "scoring 3 on 3 cpus"
            assert [scores[f"s{i}"]["score"] for i in (1, 2, 3)] == [10, 20, 30]
            assert {s["of"] for s in scores.values()} == {3}
            assert len({s["run"] for s in scores.values()}) == 1
            assert len({r["started_at"] for r in got.values()}) == 1
            assert not agent._gatherings

    arun(scenario)


def test_a_missing_member_does_not_hold_the_batch(sandbox: Sandbox) -> None:
    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, agent):
            await server.next("register")
            sent = time.monotonic()
            for i in (1, 2):  # the third member never comes (re-queued elsewhere, say)
                await server.send({"type": "assign", "action": member(f"s{i}", i)})
            got = await results(server, 2)
            assert time.monotonic() - sent >= batches.GATHER_S
            assert sorted(json.loads(r["stdout"])["of"] for r in got.values()) == [2, 2]
            # A late member of the same batch runs on its own.
            await server.send({"type": "assign", "action": member("s3", 3)})
            late = (await results(server, 1))["s3"]
            scored = json.loads(late["stdout"])
            assert (scored["score"], scored["of"]) == (30, 1)
            assert not agent._gatherings

    arun(scenario)


def test_a_scorer_that_fails_fails_every_member_saying_why(sandbox: Sandbox) -> None:
    short = "def score(samples):\n    return samples[:1]\n"
    raising = "def score(samples):\n    return [1 / 0 for s in samples]\n"
    unserialisable = "def score(samples):\n    return [object() for s in samples]\n"
    chatty = "import sys\ndef score(samples):\n    sys.__stdout__.write('hi')\n    return samples\n"

    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, _):
            await server.next("register")
            for i, code in enumerate((short, raising, unserialisable, chatty)):
                for j in (1, 2):
                    assignment = member(f"c{i}m{j}", j, code=code, size=2)
                    assignment["batch_id"] = f"batch:c{i}"
                    await server.send({"type": "assign", "action": assignment})
            got = await results(server, 8)
            # What a scorer writes to the real stdout goes to stderr, not into its scores.
            for action_id in ("c3m1", "c3m2"):
                chatty_result = got.pop(action_id)
                assert chatty_result["state"] == "succeeded", chatty_result
                assert chatty_result["stderr"] == "hi"
            errors = {}
            for action_id, result in got.items():
                assert result["state"] == "failed", result
                assert result["stdout"] == ""
                errors.setdefault(action_id[:2], set()).add(result["error"])
            assert errors["c0"] == {"score() returned 1 scores for 2 samples"}
            assert errors["c1"] == {"exited with code 1: ZeroDivisionError: division by zero"}
            (unserialisable_error,) = errors["c2"]
            assert unserialisable_error.startswith("score() must return a list of JSON values")

    arun(scenario)


def test_members_naming_other_scorers_or_bad_payloads_are_kept_apart(sandbox: Sandbox) -> None:
    doubling = SCORER.replace("s * 10", "s * 2")

    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, _):
            await server.next("register")
            await server.send({"type": "assign", "action": member("s1", 1)})
            await server.send({"type": "assign", "action": member("s2", 2, code=doubling)})
            bad = member("s3", 3)
            del bad["payload"]["sample"]
            await server.send({"type": "assign", "action": bad})
            got = await results(server, 3)
            first, second = json.loads(got["s1"]["stdout"]), json.loads(got["s2"]["stdout"])
            assert (first["score"], first["of"]) == (10, 1)
            assert (second["score"], second["of"]) == (4, 1)
            assert first["run"] != second["run"]
            assert got["s3"]["state"] == "failed"
            assert got["s3"]["error"] == "invalid payload: sample is required"

    arun(scenario)


def test_cancelled_members_leave_and_the_run_dies_with_the_last(sandbox: Sandbox) -> None:
    slow = "import time\ndef score(samples):\n    time.sleep(30)\n    return samples\n"

    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, agent):
            await server.next("register")
            for i in (1, 2):
                assignment = member(f"s{i}", i, code=slow, size=2)
                await server.send({"type": "assign", "action": assignment})
            await server.next("started")
            await server.next("started")
            await until(lambda: bool(sandbox_processes(sandbox, settle_s=0)), what="the scorer")
            await server.send({"type": "cancel", "action": "s1", "attempt": 1})
            first = (await results(server, 1, timeout=5))["s1"]
            assert first["state"] == "cancelled"
            assert first["started_at"] is not None
            assert sandbox_processes(sandbox, settle_s=0), "the run went with its first member"
            await server.send({"type": "cancel", "action": "s2", "attempt": 1})
            second = (await results(server, 1, timeout=5))["s2"]
            assert second["state"] == "cancelled"
            assert sandbox_processes(sandbox) == []
            assert not agent._gatherings

    arun(scenario)


def test_one_alone_is_scored_as_a_batch_of_one(sandbox: Sandbox) -> None:
    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, _):
            await server.next("register")
            await server.send({"type": "assign", "action": member("s1", {"text": "hi"}, size=1)})
            result = (await results(server, 1))["s1"]
            assert result["state"] == "failed"  # {"text": "hi"} * 10 is a TypeError
            assert result["error"].startswith("exited with code 1: TypeError: unsupported operand")
            ok = member("s2", 0.5, size=1)
            await server.send({"type": "assign", "action": ok})
            scored = (await results(server, 1))["s2"]
            assert json.loads(scored["stdout"])["score"] == 5.0

    arun(scenario)


def test_members_join_while_the_batch_waits_for_a_slot_and_may_leave(sandbox: Sandbox) -> None:
    """One slot, held by a 5 s sleep: the batch's third member arrives, its second is
    cancelled, both while the gathered batch waits for the slot."""

    async def scenario() -> None:
        executors: dict[str, Executor] = {
            "reward.python": ScorerExecutor(sandbox),
            "sleep": SleepExecutor(),
        }
        async with running_agent(executors=executors, max_concurrency=1) as (server, agent):
            await server.next("register")
            await server.send({"type": "assign", "action": sleep_assignment(5.0, "hold")})
            await server.next("started")
            for i in (1, 2):
                await server.send({"type": "assign", "action": member(f"s{i}", i)})
            await asyncio.sleep(batches.GATHER_S + 1.0)  # gathered; waiting for the slot
            await server.send({"type": "assign", "action": member("s3", 3)})
            await asyncio.sleep(0.5)
            await server.send({"type": "cancel", "action": "s2", "attempt": 1})
            got = await results(server, 4)
            assert got["s2"]["state"] == "cancelled"
            assert got["s2"]["started_at"] is None
            scored = {key: json.loads(got[key]["stdout"]) for key in ("s1", "s3")}
            assert [s["score"] for s in scored.values()] == [10, 30]
            assert {s["of"] for s in scored.values()} == {2}
            assert got["s1"]["started_at"] >= got["hold"]["finished_at"]
            assert not agent._gatherings

    arun(scenario)
