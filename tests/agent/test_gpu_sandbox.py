"""Sandboxes on a real NVIDIA GPU: only the GPUs given are reachable, and a reward
model scores on its GPU, loaded once for its tenant's batches.

These need the hardware: they skip where ``nvidia-smi`` lists no GPU. The
scorer test also needs PyTorch with CUDA for the sandbox's Python
(``$TANGRAM_TEST_GPU_PYTHON``, else the one running the tests), and skips
saying so where it is missing. On a GPU host without the project's services:
``python -m pytest --confcutdir tests/agent tests/agent/test_gpu_sandbox.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from tangram_agent.executors import Sandbox, SandboxExecutor, SandboxSettings, ScorerExecutor
from tangram_agent.executors.sandbox import environment_binds
from tangram_agent.gpus import discover_gpus
from tests.agent.conftest import make_assignment, needs_bwrap, sandbox_processes

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(
        shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU and nvidia-smi"
    ),
]

GPU_PYTHON = os.environ.get("TANGRAM_TEST_GPU_PYTHON", sys.executable)

#: Asks the driver itself (no framework) which GPUs this process can use.
DRIVER_PROBE = """\
import ctypes, json, os
cuda = ctypes.CDLL("libcuda.so.1")
status = cuda.cuInit(0)
count = ctypes.c_int(0)
if status == 0:
    cuda.cuDeviceGetCount(ctypes.byref(count))
print(json.dumps({
    "init": status,
    "count": count.value,
    "devices": sorted(name for name in os.listdir("/dev") if name.startswith("nvidia")),
    "visible": os.environ["CUDA_VISIBLE_DEVICES"],
}))
"""

#: A reward model with hand-set weights, moved to the GPU at import (its load):
#: a sample [a, b, c, d] scores a + 2b + 3c + 4d + 0.5.
TORCH_SCORER = """\
import uuid, torch
MODEL = torch.nn.Linear(4, 1, dtype=torch.float64)
with torch.no_grad():
    MODEL.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64))
    MODEL.bias.fill_(0.5)
MODEL = MODEL.to("cuda")
LOADED_BY = uuid.uuid4().hex
def score(samples):
    with torch.no_grad():
        batch = torch.tensor(samples, dtype=torch.float64, device="cuda")
        values = MODEL(batch).squeeze(-1).tolist()
    where = {
        "device": torch.cuda.get_device_name(0),
        "count": torch.cuda.device_count(),
        "param_on": str(next(MODEL.parameters()).device),
        "loaded_by": LOADED_BY,
    }
    return [{"score": value, **where} for value in values]
"""


def first_gpu() -> str:
    groups, _ = discover_gpus()
    assert groups, "nvidia-smi is here but lists no GPU"
    return groups[0][0]


def gpu_name(gpu: str) -> str:
    done = subprocess.run(
        ["nvidia-smi", "-i", gpu, "--query-gpu=name", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def gpu_processes() -> set[str]:
    done = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.strip() for line in done.stdout.splitlines() if line.strip()}


def has_cuda_torch(python: str) -> bool:
    done = subprocess.run(
        [python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
        capture_output=True,
    )
    return done.returncode == 0


@pytest.fixture
def gpu_sandbox(sandbox_settings: SandboxSettings) -> Iterator[Sandbox]:
    """A sandbox whose Python is ``GPU_PYTHON``, its environment bound read-only."""
    settings = replace(sandbox_settings, python=GPU_PYTHON, ro_binds=environment_binds(GPU_PYTHON))
    box = Sandbox(settings)
    yield box
    box.close()
    assert sandbox_processes(box) == [], "a sandbox process outlived its test"


def probe(sandbox: Sandbox, gpus: list[str]) -> dict[str, Any]:
    assignment = make_assignment(DRIVER_PROBE, gpus=gpus, memory=1024)
    outcome = asyncio.run(SandboxExecutor(sandbox, "python").execute(assignment))
    assert outcome.state == "succeeded", outcome
    return dict(json.loads(outcome.stdout))


def test_a_sandbox_reaches_only_the_gpu_it_was_given(gpu_sandbox: Sandbox) -> None:
    assert gpu_sandbox.isolation.bwrap, "without bubblewrap every GPU is reachable"
    gpu = first_gpu()
    given = probe(gpu_sandbox, [gpu])
    assert given["init"] == 0, f"cuInit failed in the sandbox: {given}"
    assert given["count"] == 1
    assert [d for d in given["devices"] if d[len("nvidia") :].isdigit()] == [f"nvidia{gpu}"]
    assert given["visible"] == "0"
    none = probe(gpu_sandbox, [])
    assert none["count"] == 0 and none["init"] != 0, none
    assert none["devices"] == []


def scorer_batch(samples: list[list[float]], gpu: str, name: str) -> list[dict[str, Any]]:
    """A batch as the server sends it: each member's allocation is its share of
    3 cores, 12 GiB and the GPU, so batches of any size are scored by one scorer."""
    size = len(samples)
    batch = []
    for i, sample in enumerate(samples):
        assignment = make_assignment(
            TORCH_SCORER,
            type="reward.python",
            action_id=f"{name}-{i}",
            sample=sample,
            gpus=[gpu],
            batch_id=f"batch:{name}",
            batch_size=size,
            timeout_s=120,
        )
        assignment["allocation"] = {"cpu": 3 / size, "memory": 12288 / size, "gpu": 1 / size}
        batch.append({**assignment, "tenant": "t1"})
    return batch


def test_a_reward_model_loads_once_on_its_gpu_and_scores_every_batch_there(
    gpu_sandbox: Sandbox,
) -> None:
    if not has_cuda_torch(GPU_PYTHON):
        pytest.skip(f"PyTorch with CUDA is not installed for {GPU_PYTHON}")
    gpu = first_gpu()
    before = gpu_processes()
    scorer = ScorerExecutor(gpu_sandbox)
    first = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    second = [[0.5, 0.5, 0.5, 0.5], [2.0, 0.0, 0.0, -1.0]]

    async def scenario() -> list[list[dict[str, Any]]]:
        scored = []
        for name, samples in (("b1", first), ("b2", second)):
            outcomes = await scorer.execute_batch(scorer_batch(samples, gpu, name))
            assert all(o.state == "succeeded" for o in outcomes), outcomes
            scored.append([json.loads(o.stdout) for o in outcomes])
        assert scorer.warm_keys(), "the scorer was not kept loaded"
        await scorer.cool()
        return scored

    b1, b2 = asyncio.run(scenario())
    assert [s["score"] for s in b1] == pytest.approx([1.5, 2.5, 10.5], abs=1e-12)
    assert [s["score"] for s in b2] == pytest.approx([5.5, -1.5], abs=1e-12)
    everything = b1 + b2
    assert {s["param_on"] for s in everything} == {"cuda:0"}
    assert {s["count"] for s in everything} == {1}
    assert {s["device"] for s in everything} == {gpu_name(gpu)}
    # One load served both batches; once cooled, its GPU memory is given back.
    assert len({s["loaded_by"] for s in everything}) == 1
    deadline = time.monotonic() + 10
    while not gpu_processes() <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gpu_processes() <= before
