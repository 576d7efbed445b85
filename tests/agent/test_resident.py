"""Resident scorers: a ``reward.python`` scorer loaded once and kept for its tenant's next
batches, in a real sandbox, and given back when anything else needs what it holds."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tangram_agent.executors import Executor, Sandbox, SandboxSettings, ScorerExecutor
from tangram_agent.executors.sandbox import IDLE_CPUS
from tangram_agent.protocol import scorer_warm_key
from tests.agent.conftest import make_assignment, needs_bwrap, sandbox_processes
from tests.agent.harness import FakeServer, arun, running_agent, until
from tests.agent.test_resize import cores_of, needs_cpu_controller

pytestmark = needs_bwrap

#: Says which process scored: a new one per load. Fails on "boom", sleeps on "slow" (30 s)
#: and "nap" (1.5 s).
SCORER = """\
import time, uuid
PROCESS = uuid.uuid4().hex
def score(samples):
    if "boom" in samples:
        raise ValueError("boom")
    if "slow" in samples:
        time.sleep(30)
    if "nap" in samples:
        time.sleep(1.5)
    return [{"score": s, "process": PROCESS} for s in samples]
"""


def member(action_id: str, sample: Any, *, tenant: str | None = "t1", **extra: Any) -> Any:
    assignment = make_assignment(
        SCORER, type="reward.python", action_id=action_id, sample=sample, **extra
    )
    if tenant is not None:
        assignment["tenant"] = tenant
    return assignment


async def score_alone(server: FakeServer, assignment: dict[str, Any]) -> dict[str, Any]:
    """Send one call (a batch of one) and return its result."""
    await server.send({"type": "assign", "action": assignment})
    result = await server.next("result")
    await server.ack(result)
    return result


def process_of(result: dict[str, Any]) -> str:
    assert result["state"] == "succeeded", result
    return str(json.loads(result["stdout"])["process"])


async def warm_reported(server: FakeServer, expected: list[str], timeout: float = 10) -> None:
    """Wait for a heartbeat that reports ``expected`` as the node's warm keys."""
    deadline = time.monotonic() + timeout
    while True:
        heartbeat = await server.next("heartbeat", timeout=max(deadline - time.monotonic(), 0.1))
        if heartbeat.get("warm") == expected:
            return


def scorer_agent(sandbox: Sandbox) -> Any:
    executors: dict[str, Executor] = {"reward.python": ScorerExecutor(sandbox)}
    return running_agent(executors=executors)


WARM_T1 = scorer_warm_key("t1", SCORER, {})


def test_a_tenants_scorer_loads_once_and_is_reported_warm(sandbox: Sandbox) -> None:
    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, agent):
            register = await server.next("register")
            # How many it keeps idle: the policy sets a cold scorer up where one is free.
            assert register["warm_slots"] == sandbox.residents.limit > 0
            first = await score_alone(server, member("a1", 1))
            await warm_reported(server, [WARM_T1])
            assert agent.warm == [WARM_T1]
            assert sandbox_processes(sandbox, settle_s=0), "the scorer stays loaded while idle"
            second = await score_alone(server, member("a2", 2))
            assert process_of(second) == process_of(first)
            assert json.loads(second["stdout"])["score"] == 2
            # Another tenant's call with the same code never sees this tenant's process,
            # and neither does a call given another allocation.
            other = await score_alone(server, member("b1", 3, tenant="t2"))
            bigger = await score_alone(server, member("a3", 4, cpu=2))
            assert len({process_of(r) for r in (first, other, bigger)}) == 3
            warm_t2 = scorer_warm_key("t2", SCORER, {})
            await warm_reported(server, sorted([WARM_T1, warm_t2]))

    arun(scenario)


def test_a_batch_that_fails_or_times_out_ends_its_scorer(sandbox: Sandbox) -> None:
    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, _):
            await server.next("register")
            first = await score_alone(server, member("a1", 1))
            failed = await score_alone(server, member("a2", "boom"))
            assert failed["state"] == "failed"
            assert failed["error"] == "exited with code 1: ValueError: boom"
            await warm_reported(server, [])
            assert sandbox_processes(sandbox) == []
            again = await score_alone(server, member("a3", 3))
            assert process_of(again) != process_of(first)
            timed_out = await score_alone(server, member("a4", "slow", timeout_s=2))
            assert timed_out["state"] == "timed_out"
            await warm_reported(server, [])
            assert sandbox_processes(sandbox) == []

    arun(scenario)


def test_cancelling_a_batch_ends_its_scorer(sandbox: Sandbox) -> None:
    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, _):
            await server.next("register")
            await score_alone(server, member("a1", 1))
            await server.send({"type": "assign", "action": member("a2", "slow")})
            await server.next("started")
            await asyncio.sleep(0.5)
            await server.send({"type": "cancel", "action": "a2", "attempt": 1})
            result = await server.next("result")
            assert result["state"] == "cancelled"
            assert sandbox_processes(sandbox) == []
            await warm_reported(server, [])

    arun(scenario)


def test_a_server_that_names_no_tenant_gets_no_resident(sandbox: Sandbox) -> None:
    async def scenario() -> None:
        async with scorer_agent(sandbox) as (server, agent):
            await server.next("register")
            first = await score_alone(server, member("a1", 1, tenant=None))
            second = await score_alone(server, member("a2", 2, tenant=None))
            assert process_of(first) != process_of(second)
            assert agent.warm == []
            assert sandbox_processes(sandbox) == []

    arun(scenario)


# -- what an idle scorer gives back, driven on the sandbox itself ------------------


@pytest.fixture
def box_with(sandbox_settings: SandboxSettings) -> Iterator[Callable[..., Sandbox]]:
    """Sandboxes on a 1 GiB node with more settings given; each closed after the test."""
    made: list[Sandbox] = []

    def make(**extra: Any) -> Sandbox:
        made.append(Sandbox(replace(sandbox_settings, memory_mib=1024, **extra)))
        return made[-1]

    yield make
    for sandbox in made:
        sandbox.close()
        assert sandbox_processes(sandbox) == [], "a scorer outlived the sandbox"


@pytest.fixture
def box(box_with: Callable[..., Sandbox]) -> Sandbox:
    return box_with()


def arun_on(sandbox: Sandbox, scenario: Callable[[], Awaitable[None]]) -> None:
    """Run ``scenario``, then end the scorers it left idle, in its event loop."""

    async def then_end() -> None:
        try:
            await scenario()
        finally:
            await sandbox.end_residents()

    arun(then_end)


async def load(sandbox: Sandbox, tenant: str = "t1", **extra: Any) -> str:
    """Score one sample with a resident scorer; which process scored it."""
    assignment = member("s", 1, tenant=tenant, **extra)
    outcome = await sandbox.score(
        assignment,
        {"scorer.py": SCORER},
        [1],
        warm_key=scorer_warm_key(tenant, SCORER, {}),
        stdout_cap=65536,
    )
    assert outcome.state == "succeeded", outcome
    return str(json.loads(outcome.stdout)[0]["process"])


async def run(sandbox: Sandbox, **extra: Any) -> None:
    outcome = await sandbox.run(make_assignment("print(1)", **extra), "python")
    assert outcome.state == "succeeded", outcome


def test_a_run_on_its_gpus_ends_an_idle_scorer(box: Sandbox) -> None:
    async def scenario() -> None:
        first = await load(box, gpus=["7"])
        await run(box, gpus=["6"])
        assert box.residents.warm_keys() == [WARM_T1]
        assert await load(box, gpus=["7"]) == first
        await run(box, gpus=["7"])
        assert box.residents.warm_keys() == []
        assert await load(box, gpus=["7"]) != first

    arun_on(box, scenario)


def test_a_run_that_needs_its_memory_ends_an_idle_scorer(box: Sandbox) -> None:
    async def scenario() -> None:
        await load(box, memory=512)
        await run(box, memory=512)  # 512 + 512 fit the node's 1024 MiB
        assert box.residents.warm_keys() == [WARM_T1]
        await run(box, memory=600)
        assert box.residents.warm_keys() == []
        assert sandbox_processes(box) == []

    arun_on(box, scenario)


def test_a_run_that_needs_its_slot_ends_an_idle_scorer(box: Sandbox) -> None:
    async def scenario() -> None:
        await load(box, memory=64)
        # Four runs at once on four slots: the scorer holds one of them.
        sleeper = "import time; time.sleep(1)"
        runs = [box.run(make_assignment(sleeper, memory=64), "python") for _ in range(4)]
        outcomes = await asyncio.gather(*runs)
        assert [o.state for o in outcomes] == ["succeeded"] * 4
        assert box.residents.warm_keys() == []

    arun_on(box, scenario)


def test_only_the_most_recently_used_scorers_are_kept(box_with: Callable[..., Sandbox]) -> None:
    box = box_with(residents=1)

    async def scenario() -> None:
        await load(box, tenant="t1", memory=64)
        await load(box, tenant="t2", memory=64)
        assert box.residents.warm_keys() == [scorer_warm_key("t2", SCORER, {})]
        assert len(sandbox_processes(box)) > 0

    arun_on(box, scenario)


def test_an_idle_scorer_is_ended_after_its_idle_time(box_with: Callable[..., Sandbox]) -> None:
    box = box_with(resident_idle_s=0.5)

    async def scenario() -> None:
        await load(box, memory=64)
        assert box.residents.warm_keys() == [WARM_T1]
        await until(lambda: box.residents.warm_keys() == [], what="the idle scorer to end")
        assert sandbox_processes(box) == []

    arun_on(box, scenario)


def test_an_idle_scorer_that_exits_by_itself_is_no_longer_warm(box: Sandbox) -> None:
    async def scenario() -> None:
        dying = SCORER + "import os, threading\nthreading.Timer(1.0, os._exit, [3]).start()\n"
        assignment = member("s", 1, memory=64)
        warm_key = scorer_warm_key("t1", dying, {})
        outcome = await box.score(
            assignment, {"scorer.py": dying}, [1], warm_key=warm_key, stdout_cap=65536
        )
        assert outcome.state == "succeeded", outcome
        assert box.residents.warm_keys() == [warm_key]
        # Its timer runs on the hundredth of a core an idle scorer is held to.
        await until(lambda: box.residents.warm_keys() == [], what="the exit to be seen")
        assert sandbox_processes(box) == []

    arun_on(box, scenario)


#: Leaves a thread spinning for as long as the scorer lives.
SPINNER = """
import threading
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
"""


def test_an_idle_scorer_is_held_to_a_hundredth_of_a_core(box: Sandbox) -> None:
    """It sits in room the server counts free: a thread it left spinning gets next to
    nothing while it is idle, and its batch's cores again when it is reused."""
    needs_cpu_controller(box)
    spinning = SCORER + SPINNER
    warm_key = scorer_warm_key("t1", spinning, {})

    async def score(sample: Any) -> None:
        assignment = member("s", sample, cpu=2, memory=64)
        files = {"scorer.py": spinning}
        outcome = await box.score(assignment, files, [sample], warm_key=warm_key, stdout_cap=4096)
        assert outcome.state == "succeeded", outcome

    async def scenario() -> None:
        await score(1)
        (pid, *_) = sandbox_processes(box, settle_s=0)
        assert cores_of(pid) == pytest.approx(IDLE_CPUS)
        used = cpu_seconds(pid)
        await asyncio.sleep(2.0)
        assert cpu_seconds(pid) - used < 0.1, "an idle scorer kept spinning"
        napping = asyncio.create_task(score("nap"))
        await until(lambda: cores_of(pid) == pytest.approx(2.0), what="the batch's cores")
        await napping
        assert cores_of(pid) == pytest.approx(IDLE_CPUS)

    arun_on(box, scenario)


def cpu_seconds(pid: int) -> float:
    """CPU seconds ``pid``'s threads have had so far, as the host's kernel counts them."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total
