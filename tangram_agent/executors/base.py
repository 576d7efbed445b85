"""What an executor is: an async callable from an assignment to an outcome.

Cancellation is asyncio cancellation: the agent cancels the run's task, and an
executor must stop its work (kill processes, remove files) before letting
``CancelledError`` through. The agent, not the executor, turns that into a
``cancelled`` result, so every executor cancels the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tangram_agent.protocol import Assignment, ResultState

DEFAULT_OUTPUT_CAP = 64 * 1024


@dataclass(frozen=True)
class Outcome:
    state: ResultState
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    error: str = ""
    started_at: float | None = None
    finished_at: float = 0.0

    @classmethod
    def invalid(cls, error: str) -> Outcome:
        """A run that never started because its payload or type is wrong."""
        return cls(state="failed", error=error, finished_at=time.time())


class Executor(Protocol):
    async def execute(self, assignment: Assignment) -> Outcome: ...


@runtime_checkable
class BatchExecutor(Executor, Protocol):
    """An executor that runs a batch's members together: the agent gathers them for it."""

    async def execute_batch(self, assignments: Sequence[Assignment]) -> list[Outcome]:
        """One outcome per assignment, in order."""
        ...


@runtime_checkable
class ResizableExecutor(Executor, Protocol):
    """An executor that can change a launched run's cores when the server resizes it."""

    def resize(self, assignment: Assignment) -> None:
        """Hold ``assignment``'s run, if launched, to its (just changed) ``cpu``."""
        ...


@runtime_checkable
class WarmExecutor(Executor, Protocol):
    """An executor that keeps state warm between runs (a loaded scorer), which the
    agent reports so that the policy places the next runs that want it here."""

    def warm_keys(self) -> list[str]:
        """The warm-state keys this node holds now."""
        ...

    def warm_slots(self) -> int:
        """The most keys it keeps: keeping one more ends the least recently used."""
        ...

    def watch_warm(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` whenever ``warm_keys`` changes."""
        ...

    async def cool(self) -> None:
        """End what is kept warm: the agent is stopping."""
        ...


class PayloadError(ValueError):
    """A payload that does not match what its executor needs."""


def cap_text(data: str, cap: int) -> tuple[str, bool]:
    """Cut ``data`` to at most ``cap`` UTF-8 bytes, saying whether it was cut."""
    raw = data.encode()
    if len(raw) <= cap:
        return data, False
    return raw[:cap].decode(errors="ignore"), True
