"""The node's GPUs: as the operator lists them, or as ``nvidia-smi`` finds them.

A GPU is known by its id, the ``N`` of its device file ``/dev/nvidiaN`` (which
is normally ``nvidia-smi``'s index). Ids come in interconnect groups (NVLink
islands, or GPUs behind one host bridge): the scheduler places a multi-GPU
action inside one group, since a collective across groups is much slower.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess

log = logging.getLogger("tangram.agent")

GpuGroups = tuple[tuple[str, ...], ...]
#: How long discovery waits for ``nvidia-smi`` (a wedged driver can hang it).
DISCOVERY_TIMEOUT_S = 10.0


def parse_gpu_groups(text: str) -> GpuGroups:
    """``"0,1,2,3/4,5,6,7"``: groups separated by ``/``, ids in a group by ``,``.

    Empty or ``none``: no GPUs. Raises ``ValueError`` naming what is wrong.
    """
    text = text.strip()
    if not text or text.lower() == "none":
        return ()
    groups = tuple(
        tuple(gpu.strip() for gpu in group.split(",") if gpu.strip()) for group in text.split("/")
    )
    check_gpu_groups(groups)
    return groups


def check_gpu_groups(groups: GpuGroups) -> None:
    """Every group non-empty, every id a non-empty string used once."""
    seen: set[str] = set()
    for position, group in enumerate(groups):
        if not group:
            raise ValueError(f"GPU group {position} is empty")
        for gpu in group:
            if not isinstance(gpu, str) or not gpu or gpu != gpu.strip() or "," in gpu:
                raise ValueError(f"GPU id {gpu!r} in group {position} is not a plain name")
            if gpu in seen:
                raise ValueError(f"GPU id {gpu!r} is listed twice")
            seen.add(gpu)


def parse_nvidia_smi(text: str) -> tuple[GpuGroups, float | None]:
    """The output of ``nvidia-smi --query-gpu=index,memory.total --format=csv,noheader,nounits``.

    All GPUs in one group (the topology is not read), and the smallest GPU's
    memory in MiB, so that ``gpu_memory`` never promises more than any one has.
    """
    ids: list[str] = []
    memory: list[float] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        index, _, total = (part.strip() for part in line.partition(","))
        if not index.isdigit():
            raise ValueError(f"unexpected nvidia-smi line {line!r}")
        ids.append(index)
        # "[N/A]" on some boards: then no gpu_memory is offered.
        with contextlib.suppress(ValueError):
            memory.append(float(total))
    if not ids:
        return (), None
    groups: GpuGroups = (tuple(ids),)
    check_gpu_groups(groups)
    return groups, min(memory) if len(memory) == len(ids) else None


def discover_gpus() -> tuple[GpuGroups, float | None]:
    """The GPUs ``nvidia-smi`` lists, in one group; none when it is absent or fails."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return (), None
    try:
        done = subprocess.run(
            [binary, "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=DISCOVERY_TIMEOUT_S,
            check=True,
        )
        return parse_nvidia_smi(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        log.warning("GPU discovery with %s failed, offering no GPUs: %r", binary, exc)
        return (), None
