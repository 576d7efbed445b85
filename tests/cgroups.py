"""The cores a cgroup lets its processes use, read from the host: what proves a
sandbox's CPU quota was set, whatever else the machine runs."""

from __future__ import annotations

from pathlib import Path

from tangram_agent.cgroups import CGROUP_ROOT


def cores_allowed(directory: Path) -> float | None:
    """The cores cgroup ``directory`` allows: its ``cpu.max`` (v2) or CFS quota (v1);
    None: unlimited."""
    if (directory / "cpu.max").exists():
        quota, period = (directory / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    quota = int((directory / "cpu.cfs_quota_us").read_text())
    return None if quota < 0 else quota / int((directory / "cpu.cfs_period_us").read_text())


def cores_of(pid: int) -> float | None:
    """The cores the cgroup of ``pid`` may use (None: unlimited)."""
    lines = [line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    for _, controllers, path in lines:
        if "cpu" in controllers.split(","):  # v1: the cpu controller's own hierarchy
            return cores_allowed(CGROUP_ROOT / "cpu" / path.lstrip("/"))
    unified = (CGROUP_ROOT / "cgroup.controllers").exists()
    mount = CGROUP_ROOT if unified else CGROUP_ROOT / "unified"
    path = next(path for _, controllers, path in lines if controllers == "")
    return cores_allowed(mount / path.lstrip("/"))
