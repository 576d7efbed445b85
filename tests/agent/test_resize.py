"""``resize``: the server takes cores back from a running elastic action, or gives it more.

Against a real sandbox: the run's cgroup, as the host's kernel holds it, is
what proves a resize landed (or did not).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tangram_agent.executors import Executor, Sandbox, SandboxExecutor, SleepExecutor
from tests.agent.conftest import make_assignment, needs_bwrap, sandbox_processes
from tests.agent.harness import FakeServer, arun, running_agent, sleep_assignment, until
from tests.cgroups import cores_of

#: Runs long enough to be resized while it runs.
NAPPER = "import time; time.sleep(4); print('done')"


def resize(action: str, cpu: float, *, attempt: int = 1, units: int = 1) -> dict[str, Any]:
    return {
        "type": "resize",
        "action": action,
        "attempt": attempt,
        "allocation": {"cpu": cpu, "memory": 256},
        "units": units,
    }


def needs_cpu_controller(sandbox: Sandbox) -> None:
    controllers = (sandbox.isolation.cgroups or ":").split(":")[1].split(",")
    if "cpu" not in controllers:
        pytest.skip("no cpu cgroup controller on this host: nothing throttles a sandbox's cores")


async def sandboxed_pid(sandbox: Sandbox) -> int:
    """A process of the (one) run in ``sandbox``, once it has launched."""
    deadline = time.monotonic() + 10
    while not (pids := sandbox_processes(sandbox, settle_s=0)):
        assert time.monotonic() < deadline, "the run never launched"
        await asyncio.sleep(0.05)
    return pids[0]


async def reported(server: FakeServer, action: str, cpu: float) -> None:
    """Wait for a heartbeat that reports ``action`` held to ``cpu`` cores."""

    async def beat() -> None:
        while {"action": action, "attempt": 1, "cpu": cpu} not in (await server.next("heartbeat"))[
            "running"
        ]:
            pass

    await asyncio.wait_for(beat(), 5)


async def barrier(server: FakeServer, action: str) -> None:
    """Return once the agent has handled every message sent before: it handles them in order."""
    await server.send({"type": "assign", "action": sleep_assignment(0, action_id=action)})
    result = await server.next("result")
    assert (result["action"], result["state"]) == (action, "succeeded")
    await server.ack(result)


def sandbox_executors(sandbox: Sandbox) -> dict[str, Executor]:
    return {"sandbox.python": SandboxExecutor(sandbox, "python"), "sleep": SleepExecutor()}


@needs_bwrap
def test_a_resize_holds_a_running_sandbox_to_its_new_cores_down_and_up(
    sandbox: Sandbox,
) -> None:
    needs_cpu_controller(sandbox)

    async def scenario() -> None:
        async with running_agent(executors=sandbox_executors(sandbox)) as (server, _):
            await server.next("register")
            assignment = make_assignment(NAPPER, action_id="e1", cpu=4, units=4)
            await server.send({"type": "assign", "action": assignment})
            pid = await sandboxed_pid(sandbox)
            assert cores_of(pid) == 4
            await reported(server, "e1", 4.0)
            await server.send(resize("e1", 1))
            await until(lambda: cores_of(pid) == 1)
            # Heartbeats say so: the server re-sends a resize they show was lost.
            await reported(server, "e1", 1.0)
            # The pool idles: the server gives it cores again.
            await server.send(resize("e1", 3, units=3))
            await until(lambda: cores_of(pid) == 3)
            await reported(server, "e1", 3.0)
            result = await server.next("result")
            assert (result["state"], result["stdout"]) == ("succeeded", "done\n"), result
            await server.ack(result)

    arun(scenario)


@needs_bwrap
def test_a_run_not_launched_yet_starts_with_the_resized_allocation(sandbox: Sandbox) -> None:
    code = "import os; print(os.environ['TANGRAM_CPUS'], os.environ['TANGRAM_UNITS'])"

    async def scenario() -> None:
        executors = sandbox_executors(sandbox)
        async with running_agent(executors=executors, max_concurrency=1) as (server, _):
            await server.next("register")
            await server.send({"type": "assign", "action": sleep_assignment(1.0)})
            await server.next("started")
            # The only slot is taken: e1 waits for it, and is shrunk while it waits.
            assignment = make_assignment(code, action_id="e1", cpu=4, units=4)
            await server.send({"type": "assign", "action": assignment})
            await server.send(resize("e1", 2, units=2))
            results = {}
            for _ in range(2):
                result = await server.next("result")
                results[result["action"]] = result
                await server.ack(result)
            assert results["e1"]["state"] == "succeeded", results["e1"]
            assert results["e1"]["stdout"] == "2 2\n"
            assert results["e1"]["started_at"] >= results["a1"]["finished_at"]

    arun(scenario)


@needs_bwrap
def test_a_resize_of_a_run_not_held_here_is_ignored(sandbox: Sandbox) -> None:
    needs_cpu_controller(sandbox)

    async def scenario() -> None:
        async with running_agent(executors=sandbox_executors(sandbox)) as (server, _):
            await server.next("register")
            await barrier(server, "done-already")
            assignment = make_assignment(NAPPER, action_id="e1", cpu=2, units=2)
            await server.send({"type": "assign", "action": assignment})
            pid = await sandboxed_pid(sandbox)
            await server.send(resize("ghost", 1))
            await server.send(resize("e1", 1, attempt=2))  # an attempt this agent never held
            await server.send(resize("done-already", 1))
            await barrier(server, "after")
            assert cores_of(pid) == 2
            result = await server.next("result")
            assert result["state"] == "succeeded", result
            await server.ack(result)
            assert server.connections == 1

    arun(scenario)


@needs_bwrap
def test_a_resize_that_changes_nothing_or_leaves_no_cores_is_ignored(sandbox: Sandbox) -> None:
    needs_cpu_controller(sandbox)

    async def scenario() -> None:
        async with running_agent(executors=sandbox_executors(sandbox)) as (server, _):
            await server.next("register")
            assignment = make_assignment(NAPPER, action_id="e1", cpu=2, units=2)
            await server.send({"type": "assign", "action": assignment})
            pid = await sandboxed_pid(sandbox)
            await server.send(resize("e1", 2, units=2))
            await server.send(resize("e1", 0, units=0))
            await barrier(server, "after")
            assert cores_of(pid) == 2
            # Ignored, not remembered: a real resize still lands.
            await server.send(resize("e1", 1))
            await until(lambda: cores_of(pid) == 1)
            result = await server.next("result")
            assert result["state"] == "succeeded", result
            await server.ack(result)

    arun(scenario)


def test_a_resized_run_of_an_executor_with_nothing_to_throttle_runs_on() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, _):
            await server.next("register")
            await server.send({"type": "assign", "action": sleep_assignment(0.5, stdout="hi")})
            await server.next("started")
            await server.send(resize("a1", 0.5))
            result = await server.next("result")
            assert (result["state"], result["stdout"]) == ("succeeded", "hi")
            await server.ack(result)
            assert server.connections == 1

    arun(scenario)


#: Prints the GPU ids it started with, then those its file lists once they differ
#: (a resize, perhaps before it looked); also run end to end (``tests/e2e``).
GPU_WATCHER = """
import os, time
first = os.environ["TANGRAM_GPUS"]
print(first, flush=True)
deadline = time.time() + 60
while time.time() < deadline:
    now = open(os.environ["TANGRAM_GPUS_FILE"]).read().strip()
    if now != first:
        print(now, flush=True)
        time.sleep(1)  # still running while heartbeats report it
        break
    time.sleep(0.05)
"""


@needs_bwrap
def test_a_resize_that_takes_gpus_back_tells_the_run_the_ones_it_keeps(sandbox: Sandbox) -> None:
    """The server took GPUs 1 and 3 back from a run submitted with ``may_shrink_gpus``:
    the file ``TANGRAM_GPUS_FILE`` names now lists 0 and 2, and heartbeats say so. A
    resize naming a GPU the run does not hold changes nothing."""

    async def scenario() -> None:
        async with running_agent(executors=sandbox_executors(sandbox)) as (server, _):
            await server.next("register")
            assignment = make_assignment(GPU_WATCHER, action_id="g1", gpus=["0", "1", "2", "3"])
            assignment["units"] = 4
            await server.send({"type": "assign", "action": assignment})
            await sandboxed_pid(sandbox)
            ref = {"action": "g1", "attempt": 1, "cpu": 1.0}
            strange = {**resize("g1", 1, units=2), "gpus": ["0", "9"]}
            strange["allocation"]["gpu"] = 2
            await server.send(strange)
            kept = {**resize("g1", 1, units=2), "gpus": ["0", "2"]}
            kept["allocation"]["gpu"] = 2
            await server.send(kept)

            async def told() -> None:
                while {**ref, "gpus": ["0", "2"]} not in (await server.next("heartbeat"))[
                    "running"
                ]:
                    pass

            await asyncio.wait_for(told(), 5)
            result = await server.next("result")
            assert (result["state"], result["stdout"]) == ("succeeded", "0,1,2,3\n0,2\n"), result
            await server.ack(result)

    arun(scenario)
