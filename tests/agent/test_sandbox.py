"""The sandbox executor, against real bubblewrap and the host's real cgroups.

Each test states one isolation property and proves it from inside a sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import resource
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tangram_agent.executors import Outcome, Sandbox, SandboxSettings, ScorerExecutor
from tangram_agent.executors.sandbox import environment_binds
from tests.agent.conftest import make_assignment, needs_bwrap, sandbox_processes

pytestmark = needs_bwrap


def run(sandbox: Sandbox, assignment: dict[str, Any]) -> Outcome:
    language = "python" if assignment["type"] == "sandbox.python" else "bash"
    return asyncio.run(sandbox.run(assignment, language))  # type: ignore[arg-type]


def test_the_sandbox_is_fully_isolated_here(sandbox: Sandbox) -> None:
    # This host has bwrap and writable cgroups: nothing may be degraded, so
    # the other tests below really exercise the strong path.
    assert sandbox.isolation.bwrap
    assert sandbox.isolation.cgroups is not None
    assert sandbox.isolation.warnings == ()


def test_python_gets_stdin_args_files_and_its_allocation(sandbox: Sandbox) -> None:
    code = """
import json, os, sys
print(json.dumps({
    "stdin": sys.stdin.read(),
    "args": sys.argv[1:],
    "data": open("data/input.txt").read(),
    "cwd": os.getcwd(),
    "units": os.environ["TANGRAM_UNITS"],
    "cpus": os.environ["TANGRAM_CPUS"],
    "uid": os.getuid(),
}))
"""
    outcome = run(
        sandbox,
        make_assignment(
            code,
            stdin="hello\n",
            args=["a", "b c"],
            files={"data/input.txt": "payload file"},
            units=3,
            cpu=2,
        ),
    )
    assert outcome.state == "succeeded", outcome
    assert outcome.exit_code == 0
    seen = json.loads(outcome.stdout)
    assert seen["stdin"] == "hello\n"
    assert seen["args"] == ["a", "b c"]
    assert seen["data"] == "payload file"
    assert seen["cwd"] == "/sandbox"
    assert seen["units"] == "3"
    assert seen["cpus"] == "2"
    assert seen["uid"] != 0
    assert outcome.started_at is not None and outcome.finished_at >= outcome.started_at


def test_bash_runs_with_args_and_reports_exit_code(sandbox: Sandbox) -> None:
    code = 'echo "args: $*"; read line; echo "stdin: $line"; echo oops >&2; exit 3'
    outcome = run(
        sandbox, make_assignment(code, type="sandbox.bash", args=["x", "y"], stdin="in\n")
    )
    assert outcome.state == "failed"
    assert outcome.exit_code == 3
    assert outcome.stdout == "args: x y\nstdin: in\n"
    assert outcome.stderr == "oops\n"
    assert "exited with code 3" in outcome.error


def test_network_is_unreachable_even_on_host_loopback(sandbox: Sandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    code = f"""
import socket
for host in ("127.0.0.1", "1.1.1.1"):
    try:
        socket.create_connection((host, {port}), timeout=2)
        print(host, "connected")
    except OSError as exc:
        print(host, "blocked", type(exc).__name__)
"""
    try:
        outcome = run(sandbox, make_assignment(code))
    finally:
        listener.close()
    assert outcome.state == "succeeded", outcome
    assert "127.0.0.1 blocked" in outcome.stdout
    assert "1.1.1.1 blocked" in outcome.stdout
    assert "connected" not in outcome.stdout


def test_host_files_are_invisible_and_only_the_work_dir_is_writable(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    secret.chmod(0o644)
    probes = ["/root", "/work/main/pyproject.toml", str(secret), "/etc/shadow", "/home"]
    code = f"""
import os
for path in {probes!r}:
    print(path, os.path.exists(path))
for path in ("/usr/owned", "/owned", "/etc/owned", "/sandbox/ok", "/tmp/ok"):
    try:
        open(path, "w").write("x")
        print(path, "writable")
    except OSError:
        print(path, "read-only")
"""
    outcome = run(sandbox, make_assignment(code))
    assert outcome.state == "succeeded", outcome
    lines = outcome.stdout.splitlines()
    for path in probes:
        assert f"{path} False" in lines
    assert "/usr/owned read-only" in lines
    assert "/owned read-only" in lines
    assert "/etc/owned read-only" in lines
    assert "/sandbox/ok writable" in lines
    assert "/tmp/ok writable" in lines
    # The work dir is gone after the run.
    assert list(sandbox.run_root.iterdir()) == []


def test_agent_environment_is_not_visible(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TANGRAM_AGENT_TOKEN", "agent-secret-token")
    code = "import os; print(sorted(os.environ)); print(os.environ.get('TANGRAM_AGENT_TOKEN'))"
    outcome = run(sandbox, make_assignment(code))
    assert outcome.state == "succeeded", outcome
    assert "agent-secret-token" not in outcome.stdout
    assert "TANGRAM_AGENT_TOKEN" not in outcome.stdout


def test_memory_bomb_fails_with_a_clear_error_and_the_next_run_is_fine(
    sandbox: Sandbox,
) -> None:
    code = """
chunks = []
while True:
    chunks.append(bytearray(16 * 1024 * 1024))  # zero-filled: every page touched
"""
    outcome = run(sandbox, make_assignment(code, memory=128))
    assert outcome.state == "failed", outcome
    assert "memory" in outcome.error
    assert run(sandbox, make_assignment("print('alive')")).stdout == "alive\n"


def test_fork_bomb_is_contained_and_cleaned_up(sandbox: Sandbox) -> None:
    code = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""
    begin = time.monotonic()
    outcome = run(sandbox, make_assignment(code, timeout_s=3))
    assert outcome.state in ("failed", "timed_out"), outcome
    assert time.monotonic() - begin < 60
    assert sandbox_processes(sandbox) == []
    assert run(sandbox, make_assignment("print('alive')")).stdout == "alive\n"


def test_bash_fork_bomb_hits_the_process_limit(sandbox: Sandbox) -> None:
    outcome = run(
        sandbox, make_assignment(":(){ :|:& };:; sleep 2", type="sandbox.bash", timeout_s=3)
    )
    assert outcome.state in ("succeeded", "failed", "timed_out")
    assert "fork" in outcome.stderr or "process limit" in outcome.error
    assert sandbox_processes(sandbox) == []


def test_an_operators_python_environment_is_used_read_only(
    sandbox_settings: SandboxSettings, shared_dir: Path
) -> None:
    """--sandbox-python and --sandbox-ro-bind: a virtualenv holding the scorers'
    libraries runs the code, and the code cannot change it."""
    env = shared_dir / "rm-env"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(env)], check=True)
    (site,) = env.glob("lib/python3*/site-packages")
    (site / "rm_weights.py").write_text("VALUE = 42\n")
    for path in (env, *env.rglob("*")):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    python = str(env / "bin" / "python3")
    assert environment_binds(python) == ((str(env), str(env)),)
    box = Sandbox(replace(sandbox_settings, python=python, ro_binds=environment_binds(python)))
    code = f"""
import hashlib, json, sys, rm_weights
try:
    open("{site}/planted.py", "w")
    wrote = "yes"
except OSError as exc:
    wrote = exc.strerror
cache = hashlib.sha256(open("/etc/ld.so.cache", "rb").read()).hexdigest()
print(json.dumps([rm_weights.VALUE, sys.prefix, wrote, cache]))
"""
    try:
        outcome = run(box, make_assignment(code))
    finally:
        box.close()
    assert outcome.state == "succeeded", outcome
    value, prefix, wrote, cache = json.loads(outcome.stdout)
    assert (value, prefix, wrote) == (42, str(env), "Read-only file system")
    assert not (site / "planted.py").exists()
    # The host's loader cache: a GPU driver's libraries registered with ldconfig load.
    assert cache == hashlib.sha256(Path("/etc/ld.so.cache").read_bytes()).hexdigest()


def test_timeout_kills_the_whole_process_tree(
    sandbox_settings: SandboxSettings, shared_dir: Path
) -> None:
    marks = shared_dir / "marks"
    marks.mkdir()
    marks.chmod(0o777)
    box = Sandbox(replace(sandbox_settings, extra_binds=((str(marks), "/marks"),)))
    code = """
touch /marks/bound
(sleep 2; touch /marks/child) &
setsid bash -c 'sleep 2; touch /marks/detached' &
nohup bash -c 'trap "" HUP TERM; sleep 2; touch /marks/nohup' >/dev/null 2>&1 &
sleep 60
"""
    try:
        begin = time.monotonic()
        outcome = run(box, make_assignment(code, type="sandbox.bash", timeout_s=1))
        assert outcome.state == "timed_out", outcome
        assert outcome.exit_code is None
        assert "timed out after 1 s" in outcome.error
        assert time.monotonic() - begin < 30
        assert sandbox_processes(box) == []
        time.sleep(3)
        assert sorted(p.name for p in marks.iterdir()) == ["bound"]
    finally:
        box.close()


def test_cancellation_kills_the_run_and_cleans_up(sandbox: Sandbox) -> None:
    async def cancel_midway() -> None:
        task = asyncio.create_task(
            sandbox.run(make_assignment("sleep 60", type="sandbox.bash"), "bash")
        )
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert sandbox_processes(sandbox) == []
    assert list(sandbox.run_root.iterdir()) == []


def test_output_is_capped_with_truncation_flags(sandbox_settings: SandboxSettings) -> None:
    box = Sandbox(replace(sandbox_settings, output_cap=1000))
    try:
        code = "import sys; sys.stdout.write('x' * 500_000); sys.stderr.write('e' * 10)"
        outcome = run(box, make_assignment(code))
    finally:
        box.close()
    assert outcome.state == "succeeded", outcome
    assert outcome.stdout == "x" * 1000
    assert outcome.stdout_truncated
    assert outcome.stderr == "e" * 10
    assert not outcome.stderr_truncated


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "code is required"),
        ({"code": "", "files": {"../escape": "x"}}, "not a relative file path"),
        ({"code": "", "files": {"/etc/passwd": "x"}}, "not a relative file path"),
        ({"code": "", "files": {"main.py": "x"}}, "would replace the code"),
        ({"code": "", "args": "not-a-list"}, "args must be a list"),
        ({"code": "", "stdin": 3}, "stdin must be a string"),
        ({"code": "print('\ud800')"}, "not valid Unicode"),
    ],
)
def test_bad_payloads_fail_without_running(
    sandbox: Sandbox, payload: dict[str, Any], message: str
) -> None:
    assignment = make_assignment("")
    assignment["payload"] = payload
    outcome = run(sandbox, assignment)
    assert outcome.state == "failed"
    assert outcome.exit_code is None
    assert message in outcome.error
    assert outcome.error.startswith("invalid payload:")


def test_concurrent_runs_use_separate_slots(sandbox: Sandbox) -> None:
    async def many() -> list[Outcome]:
        return await asyncio.gather(
            *(
                sandbox.run(
                    make_assignment(
                        "import os, time; time.sleep(0.3); print(os.listdir('.'))",
                        action_id=f"a{i}",
                    ),
                    "python",
                )
                for i in range(6)
            )
        )

    outcomes = asyncio.run(many())
    assert [o.state for o in outcomes] == ["succeeded"] * 6
    # Each run sees only its own fresh work dir.
    assert all(o.stdout == "['main.py']\n" for o in outcomes)
    assert os.listdir(sandbox.run_root) == []


def test_without_bwrap_it_degrades_loudly_but_still_limits_and_kills(
    sandbox_settings: SandboxSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tangram.agent")
    box = Sandbox(replace(sandbox_settings, bwrap=None))
    try:
        assert not box.isolation.bwrap
        assert any("NO filesystem or network isolation" in r.message for r in caplog.records)
        outcome = run(box, make_assignment("import os; print(os.getuid() != 0, os.getcwd())"))
        assert outcome.state == "succeeded", outcome
        assert outcome.stdout.startswith("True ")
        hung = run(
            box,
            make_assignment(
                "(sleep 30) & setsid sleep 30 & sleep 30", type="sandbox.bash", timeout_s=1
            ),
        )
        assert hung.state == "timed_out"
        assert sandbox_processes(box) == []
    finally:
        box.close()


def test_without_cgroups_memory_and_processes_fall_back_to_rlimits(
    sandbox_settings: SandboxSettings,
) -> None:
    box = Sandbox(replace(sandbox_settings, use_cgroups=False))
    try:
        assert box.isolation.cgroups is None
        bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))"
        outcome = run(box, make_assignment(bomb, memory=128))
        assert outcome.state == "failed"
        assert "memory" in outcome.error
        forks = run(
            box, make_assignment(":(){ :|:& };:; sleep 2", type="sandbox.bash", timeout_s=3)
        )
        assert forks.state in ("succeeded", "failed", "timed_out")
        assert sandbox_processes(box) == []
        fill_tmp = (
            "try:\n"
            "    with open('/tmp/big', 'wb') as f:\n"
            "        for _ in range(64):\n"
            "            f.write(bytes(4 * 1024 * 1024))\n"
            "except OSError as exc:\n"
            "    print('stopped', exc.errno)\n"
        )
        filled = run(box, make_assignment(fill_tmp, memory=128))
        assert filled.stdout == "stopped 28\n", filled  # ENOSPC: /tmp is capped too
        assert run(box, make_assignment("print('alive')")).stdout == "alive\n"
    finally:
        box.close()


def test_without_cgroups_only_runs_without_gpus_get_an_address_space_cap(
    sandbox_settings: SandboxSettings,
) -> None:
    """CUDA reserves far more address space than it uses: RLIMIT_AS would stop it starting."""
    box = Sandbox(replace(sandbox_settings, use_cgroups=False))
    code = "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0])"
    try:
        plain = run(box, make_assignment(code, memory=256))
        gpu = run(box, make_assignment(code, memory=256, gpus=["7"]))
    finally:
        box.close()
    assert int(plain.stdout) == 256 * 1024 * 1024
    assert int(gpu.stdout) == resource.RLIM_INFINITY


def test_killed_runs_are_reaped_by_their_child_watcher(
    sandbox_settings: SandboxSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """A run timed out, and a scorer ended as soon as it has scored (none kept), with
    no cgroup kill to wait on: asyncio's watcher still reaps them, and never logs an
    exit status read behind its back (it did on Python 3.12, and at times on 3.11)."""
    box = Sandbox(replace(sandbox_settings, use_cgroups=False, residents=0))
    scorer = ScorerExecutor(box)
    call = make_assignment(
        "def score(samples):\n    return samples", type="reward.python", sample=1
    )

    async def scenario() -> tuple[Outcome, Outcome]:
        slept = await box.run(make_assignment("import time; time.sleep(30)", timeout_s=1), "python")
        scored = await scorer.execute({**call, "tenant": "t1"})
        await scorer.cool()
        return slept, scored

    try:
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            slept, scored = asyncio.run(scenario())
    finally:
        box.close()
    assert (slept.state, scored.state) == ("timed_out", "succeeded")
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_two_sandboxes_on_one_host_never_share_uids(
    sandbox: Sandbox, sandbox_settings: SandboxSettings
) -> None:
    other = Sandbox(sandbox_settings)
    try:
        assert sandbox.uid_base is not None and other.uid_base is not None
        assert abs(other.uid_base - sandbox.uid_base) >= sandbox_settings.slots
        outcome = run(other, make_assignment("import os; print(os.getuid())"))
        assert outcome.state == "succeeded", outcome
    finally:
        other.close()


def test_run_dirs_left_by_a_dead_agent_are_wiped(sandbox_settings: SandboxSettings) -> None:
    first = Sandbox(sandbox_settings)
    leftover = first.run_root / "act-9-1-deadbeef"
    leftover.mkdir()
    (leftover / "main.py").write_text("print('old')")
    first.close()  # as if the agent died: its block is free again
    second = Sandbox(sandbox_settings)
    try:
        assert second.run_root == first.run_root
        assert not leftover.exists()
    finally:
        second.close()


#: What a run prints of its GPU view: the env and the nvidia device files it can see.
GPU_PROBE = """
import json, os
print(json.dumps({
    "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "gpus": os.environ.get("TANGRAM_GPUS"),
    "order": os.environ.get("CUDA_DEVICE_ORDER"),
    "batch": os.environ.get("TANGRAM_BATCH_ID"),
    "devices": sorted(name for name in os.listdir("/dev") if name.startswith("nvidia")),
}))
"""


@pytest.fixture
def fake_gpu_devices(shared_dir: Path) -> Path:
    """A directory laid out like a 4-GPU host's /dev (plain files: no GPU here)."""
    devices = shared_dir / "dev"
    devices.mkdir(mode=0o755)
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (devices / name).write_text(name)
        (devices / name).chmod(0o666)
    return devices


def test_a_run_sees_its_gpu_ids_and_batch_where_the_host_has_no_gpu_devices(
    sandbox_settings: SandboxSettings, shared_dir: Path
) -> None:
    (shared_dir / "no-gpus").mkdir(mode=0o755)
    box = Sandbox(replace(sandbox_settings, device_dir=shared_dir / "no-gpus"))
    try:
        outcome = run(box, make_assignment(GPU_PROBE, gpus=["2", "3"], batch_id="batch:b1"))
    finally:
        box.close()
    assert outcome.state == "succeeded", outcome
    assert json.loads(outcome.stdout) == {
        "cuda": "2,3",
        "gpus": "2,3",
        "order": "PCI_BUS_ID",
        "batch": "batch:b1",
        "devices": [],
    }


def test_only_the_assigned_gpus_device_files_are_bound_and_numbered_from_0(
    sandbox_settings: SandboxSettings, fake_gpu_devices: Path
) -> None:
    box = Sandbox(replace(sandbox_settings, device_dir=fake_gpu_devices))
    try:
        given = run(box, make_assignment(GPU_PROBE, gpus=["2", "3"]))
        none = run(box, make_assignment(GPU_PROBE))
    finally:
        box.close()
    assert given.state == "succeeded", given
    seen = json.loads(given.stdout)
    assert seen["devices"] == ["nvidia-uvm", "nvidia2", "nvidia3", "nvidiactl"]
    assert (seen["gpus"], seen["cuda"], seen["batch"]) == ("2,3", "0,1", "")
    assert none.state == "succeeded", none
    seen = json.loads(none.stdout)
    assert (seen["devices"], seen["gpus"], seen["cuda"]) == ([], "", "")
