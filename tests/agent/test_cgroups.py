"""An agent alone in its cgroup v2 moves into a leaf of it, so that the cgroup can
hold its runs' cgroups; one that shares its cgroup leaves it as it is.

This host's cgroups are v1, so these run on a directory laid out as a v2
cgroup; the move itself was checked on a v2 host (bench/README, GPU section).
"""

from __future__ import annotations

from pathlib import Path

from tangram_agent.cgroups import AGENT_LEAF, move_into_leaf


def test_an_agent_alone_in_its_cgroup_moves_into_a_leaf(tmp_path: Path) -> None:
    (tmp_path / "cgroup.procs").write_text("4242\n")
    assert move_into_leaf(tmp_path, 4242)
    assert (tmp_path / AGENT_LEAF / "cgroup.procs").read_text() == "4242"


def test_an_agent_sharing_its_cgroup_stays(tmp_path: Path) -> None:
    (tmp_path / "cgroup.procs").write_text("4242\n17\n")
    assert not move_into_leaf(tmp_path, 4242)
    assert not (tmp_path / AGENT_LEAF).exists()
    assert not move_into_leaf(tmp_path / "gone", 4242)  # no such cgroup
