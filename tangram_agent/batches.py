"""Gathering a batch's members for an executor that runs them in one pass.

The scheduler assigns a batch's members in one round, but each arrives in its
own ``assign`` message. The first to arrive opens a gathering; it runs once
all ``batch_size`` members are in, or ``GATHER_S`` after the first arrived
(a member cancelled or re-queued on the way must not hold the others). A
member that arrives after its batch started runs in a gathering of its own.

A member cancelled before the run leaves it; one cancelled during the run is
reported cancelled at once and its score dropped; the run itself is killed
only when no member is left to want it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from tangram_agent.executors import Outcome
from tangram_agent.protocol import Assignment

RunKey = tuple[str, int]
#: The longest a gathering waits for its missing members.
GATHER_S = 2.0

#: Runs a gathering: once it holds a slot it calls ``begin`` for the members,
#: and returns each one's outcome.
Runner = Callable[["Gathering"], Awaitable[dict[RunKey, Outcome]]]


class Gathering:
    def __init__(self, expected: int, run: Runner) -> None:
        self.expected = expected
        self.members: dict[RunKey, Assignment] = {}
        #: Members still waiting for the outcome (left: cancelled).
        self.waiting: set[RunKey] = set()
        self.started = False
        #: When the run began (``begin``).
        self.started_at: float | None = None
        self._full = asyncio.Event()
        self._run = run
        self._task = asyncio.create_task(self._gather_then_run())

    def join(self, key: RunKey, assignment: Assignment) -> None:
        self.members[key] = assignment
        self.waiting.add(key)
        if len(self.members) >= self.expected:
            self._full.set()

    def when_done(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once the gathering has run, or was given up."""
        self._task.add_done_callback(lambda _: callback())

    @property
    def open(self) -> bool:
        """Whether members may still join (the run has not begun)."""
        return not self.started and not self._task.done()

    def begin(self, started_at: float) -> dict[RunKey, Assignment]:
        """The members the run takes: from now on none joins, and one that leaves stays in it."""
        self.started = True
        self.started_at = started_at
        return dict(self.members)

    async def outcome(self, key: RunKey) -> Outcome:
        """``key``'s outcome once the run ends; a cancelled member leaves the gathering."""
        try:
            outcomes = await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._leave(key):  # the last one out waits for the run to be cleaned up
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            raise
        return outcomes[key]

    def _leave(self, key: RunKey) -> bool:
        """Whether ``key`` was the last member: then the run is cancelled."""
        self.waiting.discard(key)
        if not self.started:
            self.members.pop(key, None)
        if self.waiting:
            return False
        self._task.cancel()
        return True

    async def _gather_then_run(self) -> dict[RunKey, Outcome]:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._full.wait(), GATHER_S)
        return await self._run(self)
