"""Per-run cgroups: the memory, process-count and CPU limits of one sandbox run.

rlimits alone cannot contain a sandbox: RLIMIT_NPROC is per real uid and not
enforced for root, RLIMIT_AS breaks programs that reserve address space, and
neither lets us kill a whole process tree. A cgroup per run does all of it:
``memory`` caps RAM (and records OOM kills, so a memory-bomb failure can be
named), ``pids`` stops fork bombs, ``cpu`` throttles to the allocated cores,
and listing ``cgroup.procs`` finds every process to kill.

Both hierarchies are supported. cgroup v1 (one mount per controller) works as
root anywhere the controllers are mounted writable. cgroup v2 needs a parent
whose ``cgroup.subtree_control`` can enable ``memory`` and ``pids``: a
delegated cgroup given by ``--cgroup-parent``, or the agent's own. v2 enables
controllers for a cgroup's children only while no process is in it, so an
agent alone in its cgroup (a systemd service with ``Delegate=yes``, a
container's only process) first moves itself into a leaf child, as systemd
asks of delegated services. Nested under the agent's own cgroup, so a
container's limits still bound the sandboxes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tangram.agent")

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The leaf child of its own cgroup an agent alone in it moves into (cgroup v2).
AGENT_LEAF = "agent"
CPU_PERIOD_US = 100_000


def _own_paths() -> dict[str, str]:
    """Map controller (or ``""`` for v2) to this process's cgroup path."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                paths[""] = path
            for controller in controllers.split(","):
                if controller:
                    paths[controller] = path
    return paths


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _remove_stale_parents(base: Path) -> None:
    """Remove what agents that died without cleaning up left behind (empty dirs only)."""
    for stale in base.glob("tangram-agent-*"):
        pid = stale.name.removeprefix("tangram-agent-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            for child in stale.iterdir():
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                stale.rmdir()


@dataclass(frozen=True)
class RunCgroup:
    """The cgroup directories of one run (one per v1 controller, one for v2)."""

    version: int
    dirs: dict[str, Path]

    @property
    def procs_files(self) -> list[str]:
        """Files a process writes its pid to, to join this cgroup."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in dict.fromkeys(self.dirs.values()):
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return found

    def _counter(self, controller: str, filename: str, key: str) -> int:
        d = self.dirs.get(controller)
        if d is None:
            return 0
        with contextlib.suppress(OSError, ValueError):
            for line in (d / filename).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        return 0

    def oom_kills(self) -> int:
        if self.version == 1:
            return self._counter("memory", "memory.oom_control", "oom_kill")
        return self._counter("memory", "memory.events", "oom_kill")

    def pids_limit_hits(self) -> int:
        return self._counter("pids", "pids.events", "max")

    def set_cpus(self, cpus: float) -> None:
        """Throttle the run to ``cpus`` cores from now on; without a cpu controller, nothing."""
        d = self.dirs.get("cpu")
        if d is None:
            return
        quota = max(int(cpus * CPU_PERIOD_US), 1000)  # the kernel's minimum is 1 ms
        if self.version == 1:
            _write(d / "cpu.cfs_quota_us", str(quota))
        else:
            _write(d / "cpu.max", f"{quota} {CPU_PERIOD_US}")

    def kill_all(self, deadline_s: float = 5.0) -> bool:
        """SIGKILL every process in the cgroup until it is empty; True if emptied.

        Looping matters: a process may fork between reading the list and the
        kill; the pids limit bounds how long that can go on.
        """
        if self.version == 2:
            for d in dict.fromkeys(self.dirs.values()):
                with contextlib.suppress(OSError):
                    _write(d / "cgroup.kill", "1")
        stop = time.monotonic() + deadline_s
        while True:
            pids = self.pids()
            if not pids:
                return True
            if time.monotonic() > stop:
                log.error("cgroup %s still has processes %s", self.dirs, sorted(pids))
                return False
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        for d in dict.fromkeys(self.dirs.values()):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    # Killed processes leave the cgroup asynchronously.
                    time.sleep(0.02)
            else:
                log.warning("could not remove cgroup %s", d)


def move_into_leaf(base: Path, pid: int) -> bool:
    """Move process ``pid`` into ``base``'s leaf child :data:`AGENT_LEAF` if it is the
    only process in ``base``; whether it moved. A process that shares its cgroup
    leaves it alone: moving the others is not its business."""
    try:
        if (base / "cgroup.procs").read_text().split() != [str(pid)]:
            return False
        leaf = base / AGENT_LEAF
        leaf.mkdir(exist_ok=True)
        _write(leaf / "cgroup.procs", str(pid))
    except OSError as exc:
        log.debug("could not move into a leaf of %s: %s", base, exc)
        return False
    log.info("moved the agent into %s so that %s can hold its runs' cgroups", leaf, base)
    return True


class CgroupManager:
    """Creates per-run cgroups under one parent per controller."""

    def __init__(self, version: int, parents: dict[str, Path]) -> None:
        self.version = version
        self.parents = parents

    @property
    def controllers(self) -> list[str]:
        return sorted(self.parents)

    @classmethod
    def probe(cls, *, parent: str | None = None, root: Path = CGROUP_ROOT) -> CgroupManager | None:
        """Find a usable hierarchy and prove it by creating a test cgroup, or None."""
        name = f"tangram-agent-{os.getpid()}"
        manager = cls._probe_v1(root, name) if parent is None else None
        if manager is None:
            manager = cls._probe_v2(root, name, parent)
        if manager is None:
            return None
        try:
            test = manager.create(
                f"probe-{secrets.token_hex(4)}", memory_mib=64, pids_max=16, cpus=1.0
            )
        except OSError as exc:
            log.warning("cgroups present but not usable: %s", exc)
            manager.close()
            return None
        test.remove()
        return manager

    @classmethod
    def _probe_v1(cls, root: Path, name: str) -> CgroupManager | None:
        own = _own_paths()
        parents: dict[str, Path] = {}
        for controller in ("memory", "pids", "cpu"):
            mount = root / controller
            if not (mount / "cgroup.procs").exists() or controller not in own:
                continue
            _remove_stale_parents(mount / own[controller].lstrip("/"))
            parent = mount / own[controller].lstrip("/") / name
            try:
                parent.mkdir(exist_ok=True)
            except OSError as exc:
                log.debug("cgroup v1 %s not writable: %s", controller, exc)
                continue
            parents[controller] = parent
        if "memory" not in parents or "pids" not in parents:
            for parent in parents.values():
                with contextlib.suppress(OSError):
                    parent.rmdir()
            return None
        return cls(1, parents)

    @classmethod
    def _probe_v2(cls, root: Path, name: str, parent: str | None) -> CgroupManager | None:
        if parent is not None:
            base = Path(parent)
        else:
            mount = root if (root / "cgroup.controllers").exists() else root / "unified"
            own = _own_paths().get("")
            if own is None or not (mount / "cgroup.controllers").exists():
                return None
            base = mount / own.lstrip("/")
        try:
            available = (base / "cgroup.controllers").read_text().split()
            wanted = [c for c in ("memory", "pids", "cpu") if c in available]
            if "memory" not in wanted or "pids" not in wanted:
                return None
            enable = " ".join(f"+{c}" for c in wanted)
            try:
                _write(base / "cgroup.subtree_control", enable)
            except OSError:
                if parent is not None or not move_into_leaf(base, os.getpid()):
                    raise
                _write(base / "cgroup.subtree_control", enable)
            own_dir = base / name
            own_dir.mkdir(exist_ok=True)
            _write(own_dir / "cgroup.subtree_control", enable)
        except OSError as exc:
            log.debug("cgroup v2 at %s not usable: %s", base, exc)
            return None
        return cls(2, {c: own_dir for c in wanted})

    def create(self, run: str, *, memory_mib: float, pids_max: int, cpus: float) -> RunCgroup:
        """Create the cgroup of one run with its limits set; remove it on any failure."""
        dirs = {c: p / run for c, p in self.parents.items()}
        cgroup = RunCgroup(self.version, dirs)
        try:
            for d in dict.fromkeys(dirs.values()):
                d.mkdir()
            memory = str(max(int(memory_mib * 1024 * 1024), 4 * 1024 * 1024))
            if self.version == 1:
                _write(dirs["memory"] / "memory.limit_in_bytes", memory)
                # Without this, swap would let the run exceed its memory.
                swap_limit = dirs["memory"] / "memory.memsw.limit_in_bytes"
                if swap_limit.exists():
                    _write(swap_limit, memory)
                _write(dirs["pids"] / "pids.max", str(pids_max))
                if "cpu" in dirs:
                    _write(dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            else:
                d = dirs["memory"]
                _write(d / "memory.max", memory)
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
                _write(d / "pids.max", str(pids_max))
            cgroup.set_cpus(cpus)
        except OSError:
            cgroup.remove()
            raise
        return cgroup

    def close(self) -> None:
        """Remove the per-agent parents (runs must be gone)."""
        for parent in dict.fromkeys(self.parents.values()):
            with contextlib.suppress(OSError):
                parent.rmdir()
