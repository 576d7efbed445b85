"""Agent configuration: one frozen object, from the command line and the environment."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit, urlunsplit

from tangram_agent.executors import DEFAULT_OUTPUT_CAP, KNOWN_EXECUTORS, SandboxSettings
from tangram_agent.executors.sandbox import HOST_SYSTEM_DIRS, seen_by_every_sandbox
from tangram_agent.gpus import GpuGroups, check_gpu_groups, discover_gpus, parse_gpu_groups

#: The sandbox's own directories: an operator's read-only bind may not cover them
#: (under /tmp it may: the bind is mounted over the sandbox's fresh /tmp).
SANDBOX_OWN_PATHS = (*HOST_SYSTEM_DIRS, "/etc", "/proc", "/dev", "/sandbox")


def default_cpu() -> float:
    return float(os.cpu_count() or 1)


def default_memory_mib() -> float:
    """80% of the host's memory: the rest is for the OS, the agent and page cache."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(int(int(line.split()[1]) / 1024 * 0.8))
    except OSError:
        pass
    return 1024.0


def gpus_argument(text: str) -> GpuGroups | None:
    """``--gpus``: groups of ids, ``none``, or ``auto`` (None: ask ``nvidia-smi``)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return parse_gpu_groups(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def resolve_gpus(
    groups: GpuGroups | None, memory_mib: float | None
) -> tuple[GpuGroups, float | None]:
    """The GPUs to offer and their memory: ``nvidia-smi``'s where ``--gpus auto``."""
    if groups is not None:
        return groups, memory_mib
    found, found_memory_mib = discover_gpus()
    return found, found_memory_mib if memory_mib is None else memory_mib


def ro_bind_argument(text: str) -> tuple[str, str]:
    """``--sandbox-ro-bind HOST[:SANDBOX]``: the same path inside unless named."""
    host, _, inside = text.partition(":")
    return host, inside or host


@dataclass(frozen=True)
class AgentConfig:
    server: str
    token: str
    name: str
    cpu: float = field(default_factory=default_cpu)
    memory_mib: float = field(default_factory=default_memory_mib)
    executors: tuple[str, ...] = KNOWN_EXECUTORS
    labels: dict[str, str] = field(default_factory=dict)
    #: GPU ids per interconnect group; offered as ``gpu`` = their count.
    gpu_groups: GpuGroups = ()
    #: Memory of each GPU in MiB; offered as ``gpu_memory`` = this x the GPUs.
    gpu_memory_mib: float | None = None
    work_root: Path | None = None
    output_cap: int = DEFAULT_OUTPUT_CAP
    #: Defensive cap on concurrent runs; the server already assigns within capacity.
    max_concurrency: int = 64
    cgroup_parent: str | None = None
    reconnect_max_s: float = 5.0
    #: How long SIGTERM waits for in-flight runs before killing them.
    shutdown_grace_s: float = 30.0
    #: Idle ``reward.python`` scorers kept loaded between batches (0: none; None: two,
    #: or one per GPU where there are more, since a scorer is loaded on its GPUs),
    #: and for how long.
    residents: int | None = None
    resident_idle_s: float = 300.0
    #: The Python that runs ``sandbox.python`` and ``reward.python`` (None: the system's).
    sandbox_python: str | None = None
    #: Host paths every sandbox sees read-only: (host path, sandbox path).
    sandbox_ro_binds: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        scheme = urlsplit(self.server).scheme
        if scheme not in ("http", "https", "ws", "wss"):
            raise ValueError(f"server must be an http(s):// or ws(s):// URL, got {self.server!r}")
        if not self.token:
            raise ValueError("an agent token is required (--token or TANGRAM_AGENT_TOKEN)")
        if not self.name:
            raise ValueError("a node name is required (--name or TANGRAM_NODE_NAME)")
        if self.cpu <= 0 or self.memory_mib <= 0:
            raise ValueError("cpu and memory must be positive")
        if self.max_concurrency < 1 or self.output_cap < 0:
            raise ValueError("max_concurrency must be >= 1 and output_cap >= 0")
        if (self.residents or 0) < 0 or self.resident_idle_s <= 0:
            raise ValueError("residents must be >= 0 and the resident idle time positive")
        check_gpu_groups(self.gpu_groups)
        if self.gpu_memory_mib is not None and (self.gpu_memory_mib <= 0 or not self.gpu_groups):
            raise ValueError("gpu memory must be positive, and needs GPUs (--gpus)")
        unknown = sorted(set(self.executors) - set(KNOWN_EXECUTORS))
        if unknown:
            raise ValueError(f"unknown executors {unknown}; known: {list(KNOWN_EXECUTORS)}")
        for host, inside in self.sandbox_ro_binds:
            _check_ro_bind(host, inside)
        if self.sandbox_python is not None:
            _check_sandbox_python(self.sandbox_python, self.sandbox_ro_binds)

    @property
    def ws_url(self) -> str:
        parts = urlsplit(self.server)
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        path = parts.path.rstrip("/") + "/ws/agent/"
        return urlunsplit((scheme, parts.netloc, path, "", ""))

    @property
    def gpus(self) -> int:
        return sum(len(group) for group in self.gpu_groups)

    @property
    def capacity(self) -> dict[str, float]:
        capacity = {"cpu": self.cpu, "memory": self.memory_mib}
        if self.gpus:
            capacity["gpu"] = float(self.gpus)
            if self.gpu_memory_mib is not None:
                capacity["gpu_memory"] = self.gpu_memory_mib * self.gpus
        return capacity

    def sandbox_settings(self) -> SandboxSettings:
        settings = SandboxSettings(
            output_cap=self.output_cap,
            slots=self.max_concurrency,
            cgroup_parent=self.cgroup_parent,
            memory_mib=self.memory_mib,
            residents=max(2, self.gpus) if self.residents is None else self.residents,
            resident_idle_s=self.resident_idle_s,
            ro_binds=self.sandbox_ro_binds,
        )
        if self.sandbox_python is not None:
            settings = replace(settings, python=self.sandbox_python)
        if self.work_root is not None:
            settings = replace(settings, work_root=self.work_root)
        return settings


def _within(path: str, top: str) -> bool:
    return PurePosixPath(path).is_relative_to(top)


def _check_ro_bind(host: str, inside: str) -> None:
    what = f"--sandbox-ro-bind {host}:{inside}"
    if not (host.startswith("/") and inside.startswith("/")):
        raise ValueError(f"{what}: both paths must be absolute")
    if not os.path.exists(host):
        raise ValueError(f"{what}: {host} does not exist on this host")
    normal = os.path.normpath(inside)
    if normal == "/" or any(_within(normal, own) for own in SANDBOX_OWN_PATHS):
        raise ValueError(f"{what}: {normal} is the sandbox's own; bind elsewhere (/opt/...)")


def _check_sandbox_python(python: str, ro_binds: tuple[tuple[str, str], ...]) -> None:
    """The interpreter must run here (no bwrap) and be at the same path in a sandbox,
    and so must what it links to (a virtualenv's base interpreter)."""
    what = f"--sandbox-python {python}"
    if not python.startswith("/"):
        raise ValueError(f"{what}: the path must be absolute")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise ValueError(f"{what}: not an executable file on this host")
    same_path = [host for host, inside in ro_binds if host == inside]
    for path in dict.fromkeys((python, os.path.realpath(python))):
        if not (seen_by_every_sandbox(path) or any(_within(path, top) for top in same_path)):
            raise ValueError(
                f"{what}: a sandbox would not see {path}; bind the directory holding it "
                "at the same path (--sandbox-ro-bind DIR)"
            )
