"""Executors by action type, and the one place that builds them."""

from __future__ import annotations

from tangram_agent.executors.base import (
    DEFAULT_OUTPUT_CAP,
    BatchExecutor,
    Executor,
    Outcome,
    PayloadError,
    ResizableExecutor,
    WarmExecutor,
)
from tangram_agent.executors.sandbox import Sandbox, SandboxExecutor, SandboxSettings
from tangram_agent.executors.scorer import ScorerExecutor
from tangram_agent.executors.sleep import SleepExecutor

KNOWN_EXECUTORS = ("sandbox.python", "sandbox.bash", "reward.python", "sleep")

__all__ = [
    "DEFAULT_OUTPUT_CAP",
    "KNOWN_EXECUTORS",
    "BatchExecutor",
    "Executor",
    "Outcome",
    "PayloadError",
    "Sandbox",
    "SandboxExecutor",
    "SandboxSettings",
    "ScorerExecutor",
    "ResizableExecutor",
    "SleepExecutor",
    "WarmExecutor",
    "build_executors",
]


def build_executors(
    names: list[str] | tuple[str, ...], sandbox_settings: SandboxSettings
) -> tuple[dict[str, Executor], Sandbox | None]:
    """Executors for ``names``; the shared sandbox (if any) must be closed by the caller."""
    unknown = sorted(set(names) - set(KNOWN_EXECUTORS))
    if unknown:
        raise ValueError(f"unknown executors {unknown}; known: {list(KNOWN_EXECUTORS)}")
    executors: dict[str, Executor] = {}
    sandbox = None
    if any(name.startswith(("sandbox.", "reward.")) for name in names):
        sandbox = Sandbox(sandbox_settings)
    for name in names:
        if name == "sleep":
            executors[name] = SleepExecutor(output_cap=sandbox_settings.output_cap)
        elif sandbox is not None and name == "sandbox.python":
            executors[name] = SandboxExecutor(sandbox, "python")
        elif sandbox is not None and name == "sandbox.bash":
            executors[name] = SandboxExecutor(sandbox, "bash")
        elif sandbox is not None and name == "reward.python":
            executors[name] = ScorerExecutor(sandbox)
    return executors, sandbox
