"""The agent daemon against a small real websocket server playing the server's side
(``tests.agent.harness``)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import serve

from tangram_agent.__main__ import parse_args
from tangram_agent.agent import Agent
from tangram_agent.config import AgentConfig
from tangram_agent.executors import Executor, Sandbox, SandboxExecutor, SleepExecutor
from tangram_agent.protocol import PROTOCOL_VERSION
from tests.agent.conftest import make_assignment, needs_bwrap
from tests.agent.harness import TOKEN, FakeServer, arun, running_agent, sleep_assignment, until


def test_registers_with_token_capacity_and_executors() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, agent):
            register = await server.next("register")
            assert server.authorization == [f"Bearer {TOKEN}"]
            assert register["protocol"] == PROTOCOL_VERSION
            assert register["gpu_groups"] == []
            assert register["node"] == "node-a"
            assert register["capacity"] == {"cpu": 2, "memory": 1024}
            assert register["executors"] == ["sleep"]
            assert register["running"] == []
            assert register["warm_slots"] == 0  # nothing it runs keeps state warm
            heartbeat = await server.next("heartbeat")
            assert heartbeat["running"] == []
            assert agent.node_id == "node-1"

    arun(scenario)


def test_registers_its_gpu_groups_and_offers_them_as_capacity() -> None:
    async def scenario() -> None:
        groups = (("0", "1", "2", "3"), ("4", "5", "6", "7"))
        async with running_agent(gpu_groups=groups, gpu_memory_mib=81_920) as (server, _):
            register = await server.next("register")
            assert register["gpu_groups"] == [["0", "1", "2", "3"], ["4", "5", "6", "7"]]
            assert register["capacity"] == {
                "cpu": 2,
                "memory": 1024,
                "gpu": 8,
                "gpu_memory": 8 * 81_920,
            }

    arun(scenario)


def test_a_stopping_agent_closes_its_connection_as_going_away() -> None:
    """1001, not the 1011 (internal error) that cancelling the connection would send."""

    async def scenario() -> None:
        async with running_agent() as (server, _):
            await server.next("register")
        for _ in range(100):
            if server.close_codes:
                break
            await asyncio.sleep(0.05)
        assert server.close_codes == [1001]

    arun(scenario)


def test_assign_reports_started_then_result_and_ack_clears_it() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, agent):
            await server.next("register")
            await server.send({"type": "assign", "action": sleep_assignment(0.1, stdout="hi")})
            started = await server.next("started")
            assert (started["action"], started["attempt"]) == ("a1", 1)
            result = await server.next("result")
            assert result["state"] == "succeeded"
            assert result["stdout"] == "hi"
            assert result["exit_code"] == 0
            assert result["finished_at"] >= result["started_at"] >= started["started_at"] - 1
            await server.send({"type": "ack", "action": "a1", "attempt": 1})
            await until(lambda: agent._unacked == {}, what="the ack to clear the result")

    arun(scenario)


def test_runs_survive_a_disconnect_and_unacked_results_are_resent() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, _):
            await server.next("register")
            await server.send({"type": "assign", "action": sleep_assignment(1.0)})
            await server.next("started")
            await server.drop()
            # The agent comes back and says it still runs the action.
            register = await server.next("register")
            assert register["running"] == [{"action": "a1", "attempt": 1, "cpu": 1.0}]
            first = await server.next("result")
            assert first["state"] == "succeeded"
            # No ack: after the next reconnect the same result comes again.
            await server.drop()
            await server.next("register")
            again = await server.next("result")
            assert again == first
            await server.send({"type": "ack", "action": "a1", "attempt": 1})
            await asyncio.sleep(0.1)
            await server.drop()
            register = await server.next("register")
            assert register["running"] == []
            await server.next("heartbeat")
            assert server.inbox.empty() or all(
                m["type"] == "heartbeat"
                for m in list(server.inbox._queue)  # type: ignore[attr-defined]
            )

    arun(scenario)


def test_duplicate_assign_runs_once_and_resends_a_finished_result() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, _):
            await server.next("register")
            assignment = sleep_assignment(0.3)
            await server.send({"type": "assign", "action": assignment})
            await server.send({"type": "assign", "action": assignment})
            await server.next("started")
            result = await server.next("result")
            await server.send({"type": "assign", "action": assignment})
            assert await server.next("result") == result
            await server.ack(result)
            assert server.inbox.empty() or all(
                m["type"] == "heartbeat"
                for m in list(server.inbox._queue)  # type: ignore[attr-defined]
            )

    arun(scenario)


def test_cancel_kills_the_run_and_reports_cancelled() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, _):
            await server.next("register")
            await server.send({"type": "assign", "action": sleep_assignment(30)})
            await server.next("started")
            await server.send({"type": "cancel", "action": "a1", "attempt": 1})
            result = await server.next("result", timeout=5)
            assert result["state"] == "cancelled"
            assert result["started_at"] is not None
            await server.ack(result)
            # A cancel for a run the agent does not hold changes nothing and gets no reply.
            await server.send({"type": "cancel", "action": "ghost", "attempt": 2})
            await server.next("heartbeat")
            await server.next("heartbeat")
            assert all(m["type"] == "heartbeat" for m in list(server.inbox._queue))  # type: ignore[attr-defined]

    arun(scenario)


def test_a_batch_member_cancelled_while_it_waits_its_turn_leaves_the_others_running() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, agent):
            await server.next("register")
            for action_id, seconds in (("m1", 1.0), ("m2", 30.0), ("m3", 0.0)):
                member = sleep_assignment(seconds, action_id=action_id)
                member.update(batch_id="batch:m1", batch_size=3)
                await server.send({"type": "assign", "action": member})
            started = await server.next("started")
            assert started["action"] == "m1"  # the others wait their turn
            await server.send({"type": "cancel", "action": "m2", "attempt": 1})
            results = {}
            for _ in range(3):
                result = await server.next("result", timeout=10)
                results[result["action"]] = result
                await server.ack(result)
            assert results["m2"]["state"] == "cancelled"
            assert results["m2"]["started_at"] is None  # it never ran
            assert (results["m1"]["state"], results["m3"]["state"]) == ("succeeded", "succeeded")
            assert results["m1"]["finished_at"] <= results["m3"]["started_at"]
            assert not agent._batches  # no lock outlives its batch

    arun(scenario)


def test_unknown_type_bad_payload_and_malformed_messages_fail_cleanly() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, _):
            await server.next("register")
            assert server.connection is not None
            await server.connection.send("{not json")
            await server.send({"type": "assign", "action": {"id": "no-attempt"}})
            unknown = {**sleep_assignment(0), "type": "gpu.reward"}
            await server.send({"type": "assign", "action": unknown})
            result = await server.next("result")
            assert result["state"] == "failed"
            assert "no executor for 'gpu.reward'" in result["error"]
            await server.ack(result)
            bad = sleep_assignment(0, action_id="a2")
            bad["payload"]["seconds"] = "soon"
            await server.send({"type": "assign", "action": bad})
            result = await server.next("result")
            assert (result["action"], result["state"]) == ("a2", "failed")
            assert "invalid payload" in result["error"]
            await server.ack(result)
            assert server.connections == 1  # malformed messages did not break the session

    arun(scenario)


def test_a_rejected_agent_keeps_retrying() -> None:
    async def scenario() -> None:
        server = FakeServer()
        server.reject_next = True
        async with serve(server.handler, "127.0.0.1", 0) as ws_server:
            port = ws_server.sockets[0].getsockname()[1]
            agent = Agent(
                AgentConfig(
                    server=f"ws://127.0.0.1:{port}", token=TOKEN, name="n", reconnect_max_s=0.2
                ),
                executors={"sleep": SleepExecutor()},
            )
            task = asyncio.create_task(agent.run())
            await server.next("register")  # rejected
            await server.next("register")  # accepted on retry
            assert server.connections == 1
            agent.stop()
            await asyncio.wait_for(task, 10)

    arun(scenario)


def test_stop_finishes_in_flight_runs_reports_and_exits() -> None:
    async def scenario() -> None:
        async with running_agent() as (server, agent):
            await server.next("register")
            await server.send({"type": "assign", "action": sleep_assignment(0.5)})
            await server.next("started")
            agent.stop()
            # Work arriving while draining is not started.
            await server.send({"type": "assign", "action": sleep_assignment(0, "late")})
            result = await server.next("result")
            assert (result["action"], result["state"]) == ("a1", "succeeded")
            await server.send({"type": "ack", "action": "a1", "attempt": 1})
        assert all(m.get("action") != "late" for m in list(server.inbox._queue))  # type: ignore[attr-defined]

    arun(scenario)


def test_stop_after_the_grace_period_kills_runs_without_reporting() -> None:
    async def scenario() -> None:
        async with running_agent(shutdown_grace_s=0.2) as (server, agent):
            await server.next("register")
            await server.send({"type": "assign", "action": sleep_assignment(30)})
            await server.next("started")
        assert agent._runs == {}
        assert all(m["type"] != "result" for m in list(server.inbox._queue))  # type: ignore[attr-defined]

    arun(scenario)


def test_stop_from_another_thread_while_disconnected() -> None:
    async def scenario() -> None:
        # Nothing listens on this port: the agent just keeps retrying.
        agent = Agent(
            AgentConfig(server="http://127.0.0.1:9", token=TOKEN, name="n", reconnect_max_s=0.2),
            executors={},
        )
        task = asyncio.create_task(agent.run())
        await asyncio.sleep(0.3)
        await asyncio.to_thread(agent.stop)
        await asyncio.wait_for(task, 10)

    arun(scenario)


@needs_bwrap
def test_sandbox_action_through_the_agent(sandbox: Sandbox) -> None:
    async def scenario() -> None:
        executors: dict[str, Executor] = {"sandbox.python": SandboxExecutor(sandbox, "python")}
        async with running_agent(executors=executors) as (server, _):
            await server.next("register")
            assignment = make_assignment("print(6 * 7)", action_id="sb1")
            await server.send({"type": "assign", "action": assignment})
            result = await server.next("result")
            assert (result["state"], result["stdout"]) == ("succeeded", "42\n")
            await server.send({"type": "ack", "action": "sb1", "attempt": 1})

    arun(scenario)


@needs_bwrap
def test_a_sandbox_run_sees_the_gpus_and_batch_of_its_assignment(sandbox: Sandbox) -> None:
    """Members of a batch take turns, each with the batch's whole allocation (its share x 2)."""
    code = (
        "import os, time; start = time.time(); time.sleep(0.5);"
        " print(os.environ['TANGRAM_GPUS'], os.environ['CUDA_VISIBLE_DEVICES'],"
        " os.environ['TANGRAM_BATCH_ID'], os.environ['TANGRAM_CPUS'], start, time.time())"
    )

    async def scenario() -> None:
        executors: dict[str, Executor] = {"sandbox.python": SandboxExecutor(sandbox, "python")}
        async with running_agent(executors=executors, gpu_groups=(("4", "5"),)) as (server, _):
            await server.next("register")
            for action_id in ("m1", "m2"):  # two members of one batch, each its own run
                assignment = make_assignment(
                    code,
                    action_id=action_id,
                    cpu=1,
                    gpus=["4", "5"],
                    batch_id="batch:m1",
                    batch_size=2,
                )
                await server.send({"type": "assign", "action": assignment})
            results = [await server.next("result"), await server.next("result")]
            assert sorted(r["action"] for r in results) == ["m1", "m2"]
            runs = []
            for result in results:
                assert result["state"] == "succeeded", result
                *seen, start, end = result["stdout"].split()
                # No /dev/nvidia* on a host without GPUs: the ids are the host's own.
                assert seen == ["4,5", "4,5", "batch:m1", "2"]
                runs.append((float(start), float(end)))
                await server.ack(result)
            first, second = sorted(runs)
            assert first[1] <= second[0], "members of one batch ran at once"

    arun(scenario)


def test_config_rejects_bad_values_and_builds_the_ws_url(tmp_path: Path) -> None:
    config = AgentConfig(server="https://tangram.example/base/", token="t", name="n")
    assert config.ws_url == "wss://tangram.example/base/ws/agent/"
    with pytest.raises(ValueError, match="token"):
        AgentConfig(server="http://x", token="", name="n")
    with pytest.raises(ValueError, match="unknown executors"):
        AgentConfig(server="http://x", token="t", name="n", executors=("docker",))
    with pytest.raises(ValueError, match="http"):
        AgentConfig(server="ftp://x", token="t", name="n")
    with pytest.raises(ValueError, match="'1' is listed twice"):
        AgentConfig(server="http://x", token="t", name="n", gpu_groups=(("0", "1"), ("1",)))
    with pytest.raises(ValueError, match="needs GPUs"):
        AgentConfig(server="http://x", token="t", name="n", gpu_memory_mib=1024)
    with pytest.raises(ValueError, match="residents"):
        AgentConfig(server="http://x", token="t", name="n", residents=-1)


def test_idle_scorers_kept_default_to_two_or_one_per_gpu() -> None:
    def kept(**config: Any) -> int:
        return (
            AgentConfig(server="http://x", token="t", name="n", **config)
            .sandbox_settings()
            .residents
        )

    eight = (("0", "1", "2", "3"), ("4", "5", "6", "7"))
    assert (kept(), kept(gpu_groups=(("0",),)), kept(gpu_groups=eight)) == (2, 2, 8)
    assert kept(gpu_groups=eight, residents=0) == 0


def test_cli_reads_the_environment_and_drains_on_sigterm(shared_dir: Path) -> None:
    async def scenario() -> None:
        server = FakeServer()
        async with serve(server.handler, "127.0.0.1", 0) as ws_server:
            port = ws_server.sockets[0].getsockname()[1]
            env = {
                **os.environ,
                "TANGRAM_SERVER": f"http://127.0.0.1:{port}",
                "TANGRAM_AGENT_TOKEN": TOKEN,
                "TANGRAM_NODE_NAME": "cli-node",
            }
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tangram_agent",
                "--cpu",
                "3",
                "--memory",
                "2048",
                "--executors",
                "sleep",
                "--gpus",
                "0,1/2,3",
                "--gpu-memory-mib",
                "1000",
                "--work-root",
                str(shared_dir / "cli-work"),
                env=env,
            )
            try:
                register = await server.next("register")
                assert (register["node"], register["capacity"]) == (
                    "cli-node",
                    {"cpu": 3, "memory": 2048, "gpu": 4, "gpu_memory": 4000},
                )
                assert register["gpu_groups"] == [["0", "1"], ["2", "3"]]
                assert server.authorization == [f"Bearer {TOKEN}"]
                await server.send({"type": "assign", "action": sleep_assignment(0.5)})
                await server.next("started")
                proc.send_signal(signal.SIGTERM)
                result = await server.next("result")
                assert result["state"] == "succeeded"
                await server.ack(result)
                assert await asyncio.wait_for(proc.wait(), 20) == 0
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    arun(scenario)


def test_the_sandbox_python_and_read_only_binds_are_checked_and_reach_the_sandbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python3"
    python.symlink_to("/usr/bin/python3")
    argv = ["--server", "http://x", "--token", "t", "--name", "n"]
    config = parse_args(
        [*argv, "--sandbox-python", str(python), "--sandbox-ro-bind", str(env),
         "--sandbox-ro-bind", f"{tmp_path}:/models"]
    )  # fmt: skip
    settings = config.sandbox_settings()
    assert settings.python == str(python)
    assert settings.ro_binds == ((str(env), str(env)), (str(tmp_path), "/models"))
    assert AgentConfig(server="http://x", token="t", name="n").sandbox_settings().python == (
        "/usr/bin/python3"
    )

    def refused(**config: Any) -> str:
        with pytest.raises(ValueError) as exc:
            AgentConfig(server="http://x", token="t", name="n", **config)
        return str(exc.value)

    assert f"would not see {python};" in refused(sandbox_python=str(python))
    assert f"would not see {python};" in refused(
        sandbox_python=str(python), sandbox_ro_binds=((str(env), "/opt/env"),)
    )
    elsewhere = tmp_path / "elsewhere" / "python3"  # a pyenv or uv Python, say
    elsewhere.parent.mkdir()
    elsewhere.write_text("#!/bin/sh\n")
    elsewhere.chmod(0o755)
    (env / "bin" / "python-elsewhere").symlink_to(elsewhere)
    assert f"would not see {elsewhere};" in refused(
        sandbox_python=str(env / "bin" / "python-elsewhere"),
        sandbox_ro_binds=((str(env), str(env)),),
    )
    assert "not an executable file" in refused(sandbox_python=str(env / "bin" / "python9"))
    assert "absolute" in refused(sandbox_python="python3")
    assert "does not exist" in refused(sandbox_ro_binds=(("/nonexistent-tangram", "/opt/x"),))
    for own in ("/", "/usr/lib/x", "/etc", "/sandbox/x", "/tmp/../dev"):
        assert "sandbox's own" in refused(sandbox_ro_binds=((str(env), own),))
    with pytest.raises(SystemExit) as exit_:
        parse_args([*argv, "--sandbox-ro-bind", f"{env}:relative"])
    assert exit_.value.code == 2
    assert "--sandbox-ro-bind" in capsys.readouterr().err
