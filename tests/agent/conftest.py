"""Fixtures for the agent tests: a real sandbox (real bwrap, real cgroups)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tangram_agent.executors import Sandbox, SandboxSettings

#: Slot uids of the test sandboxes start here (plus a claimed block offset).
TEST_UID_BASE = 61000
TEST_SLOTS = 4

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed on this host"
)


def make_assignment(
    code: str,
    *,
    type: str = "sandbox.python",
    timeout_s: float = 20,
    cpu: float = 1,
    memory: float = 256,
    units: int = 1,
    action_id: str = "act-1",
    attempt: int = 1,
    gpus: list[str] | None = None,
    batch_id: str | None = None,
    batch_size: int = 1,
    **payload: Any,
) -> dict[str, Any]:
    assignment: dict[str, Any] = {
        "id": action_id,
        "attempt": attempt,
        "type": type,
        "payload": {"code": code, **payload},
        "allocation": {"cpu": cpu, "memory": memory},
        "units": units,
        "timeout_s": timeout_s,
    }
    if gpus is not None:  # protocol 2; an older server sends neither
        assignment["allocation"]["gpu"] = len(gpus)
        assignment["gpus"] = gpus
        assignment["batch_id"] = batch_id
        assignment["batch_size"] = batch_size
    return assignment


def sandbox_processes(box: Sandbox, settle_s: float = 5.0) -> list[int]:
    """Host pids running as any slot uid of ``box``, once given ``settle_s`` to exit.

    SIGKILLed processes and a dying pid namespace go away asynchronously.
    """
    deadline = time.monotonic() + settle_s
    while (found := _sandbox_processes(box)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def _sandbox_processes(box: Sandbox) -> list[int]:
    assert box.uid_base is not None, "the agent tests run as root"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        if "\nState:\tZ" in status:
            continue  # already dead, waiting for a reaper
        for line in status.splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
                if box.uid_base <= uid < box.uid_base + box.settings.slots:
                    found.append(int(entry))
    return found


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A host dir the sandbox uids can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="tangram-agent-test-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sandbox_settings(shared_dir: Path) -> SandboxSettings:
    return SandboxSettings(
        work_root=shared_dir / "work-root", slots=TEST_SLOTS, uid_base=TEST_UID_BASE
    )


@pytest.fixture
def sandbox(sandbox_settings: SandboxSettings) -> Iterator[Sandbox]:
    box = Sandbox(sandbox_settings)
    yield box
    box.close()
    assert sandbox_processes(box) == [], "a sandbox process outlived its test"
