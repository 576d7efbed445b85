"""Resident scorers: a ``reward.python`` scorer kept loaded between batches.

A scorer's module is imported once (that is where a reward model loads), then
the process waits for batches on its stdin, one JSON list of samples a line,
and answers each with a JSON list of scores on its own pipe. Between batches it
sits idle in its sandbox and cgroup, and the agent reports its warm key
(:func:`tangram_agent.protocol.scorer_warm_key`) so that the policy sends the
scorer's next calls here, where they skip the load.

What an idle scorer holds, the server has already counted free, so it is held
to a hundredth of a core while idle, and gives the rest back before anything
else needs it: the agent evicts an idle scorer (least
recently used first) when a run is launched on one of its GPUs, when its
memory would take the node's runs past the node's memory, when a run needs
its sandbox slot, when more than ``residents`` are idle, and after
``resident_idle_s`` idle. A scorer is reused only by its own tenant, for the
same code and files, with the same allocation and GPU ids it was launched
with (its environment and device files are fixed at its start); any other
batch launches a new one. One that exits while idle is ended and no longer
reported warm.

A batch that fails (the scorer raised, or answered with the wrong count),
times out or is cancelled ends its scorer: the next batch starts clean.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangram_agent.cgroups import RunCgroup

#: What the runner prints before a complaint about what ``score`` returned.
COMPLAINT = "tangram scorer: "
#: Written by the runner to stderr after each batch, so the agent knows where
#: one batch's stderr ends and the next one's begins.
BATCH_END = b"\0tangram-batch-end\0\n"

#: Runs in the sandbox: load the scorer, then score one batch a line, until stdin closes.
_RUNNER_TEMPLATE = """\
import json, os, sys
replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # anything the scorer writes to stdout goes to stderr
sys.stdout = sys.stderr
sys.path.insert(0, "")
from scorer import score
for line in sys.stdin:
    samples = json.loads(line)
    scores = score(samples)
    try:
        scores = list(scores)
        text = json.dumps(scores)
    except (TypeError, ValueError) as exc:
        sys.exit({complaint!r} + f"score() must return a list of JSON values: {{exc}}")
    if len(scores) != len(samples):
        count = f"{{len(scores)}} scores for {{len(samples)}} samples"
        sys.exit({complaint!r} + "score() returned " + count)
    sys.stderr.flush()
    sys.stderr.buffer.write({end!r})
    sys.stderr.buffer.flush()
    replies.write(text + "\\n")
    replies.flush()
"""
RESIDENT_RUNNER = _RUNNER_TEMPLATE.format(complaint=COMPLAINT, end=BATCH_END)


@dataclass(frozen=True)
class ResidentKey:
    """What a batch must share with a resident scorer to be scored by it."""

    warm_key: str
    allocation: tuple[tuple[str, float], ...]
    gpus: tuple[str, ...]


class BatchStderr:
    """A resident's stderr, cut into batches at :data:`BATCH_END`, each capped at ``cap`` bytes."""

    def __init__(self, stream: asyncio.StreamReader, cap: int) -> None:
        self.stream = stream
        self.cap = cap
        self.data = bytearray()
        self.truncated = False
        #: One (text, truncated) per batch the runner finished.
        self.batches: asyncio.Queue[tuple[str, bool]] = asyncio.Queue()

    def _keep(self, chunk: bytes | bytearray) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data += chunk[:room]

    def take(self) -> tuple[str, bool]:
        """This batch's stderr so far; the next starts empty."""
        taken = self.data.decode(errors="replace"), self.truncated
        self.data, self.truncated = bytearray(), False
        return taken

    async def drain(self) -> None:
        pending = bytearray()
        while chunk := await self.stream.read(65536):
            pending += chunk
            while (at := pending.find(BATCH_END)) >= 0:
                self._keep(pending[:at])
                self.batches.put_nowait(self.take())
                del pending[: at + len(BATCH_END)]
            # Keep back a tail that may be the start of a marker.
            safe = len(pending) - len(BATCH_END) + 1
            if safe > 0:
                self._keep(pending[:safe])
                del pending[:safe]
        self._keep(pending)


@dataclass(eq=False)
class Resident:
    """One launched scorer process and what it holds."""

    key: ResidentKey
    proc: asyncio.subprocess.Process
    cgroup: RunCgroup | None
    run_dir: Path
    slot: int
    memory_mib: float
    cpu_s: int
    stderr: BatchStderr
    #: Reads its stderr (``BatchStderr.drain``).
    drain: asyncio.Task[None]
    #: Pending eviction of an idle scorer (``resident_idle_s``).
    expiry: asyncio.TimerHandle | None = None
    #: Ends it if it exits while idle.
    watcher: asyncio.Task[None] | None = None


class ResidentPool:
    """The idle resident scorers of one sandbox, least recently used first.

    A scorer in use is not here: taking one out makes it the caller's, who
    gives it back with :meth:`keep` or ends it.
    """

    def __init__(self, *, residents: int, idle_s: float) -> None:
        self.limit = residents
        self.idle_s = idle_s
        self._idle: OrderedDict[Resident, None] = OrderedDict()
        #: Called (no arguments) whenever the warm keys change.
        self.on_change: list[Callable[[], object]] = []
        self._warm: list[str] = []

    @property
    def idle(self) -> list[Resident]:
        """Idle scorers, least recently used first."""
        return list(self._idle)

    def warm_keys(self) -> list[str]:
        return list(self._warm)

    def take(self, key: ResidentKey) -> Resident | None:
        """An idle scorer for ``key``, now the caller's, or None."""
        for resident in self._idle:
            # One that just exited is its watcher's to end.
            if resident.key == key and resident.proc.returncode is None:
                self.remove(resident)
                return resident
        return None

    def keep(self, resident: Resident, expire: Callable[[Resident], Any]) -> list[Resident]:
        """Keep ``resident`` idle; returns those now over the limit (the caller ends them).

        ``expire`` is called with it once it has been idle ``idle_s``.
        """
        self._idle[resident] = None
        over = []
        while len(self._idle) > self.limit:
            oldest = next(iter(self._idle))
            self.remove(oldest)
            over.append(oldest)
        if resident in self._idle:
            loop = asyncio.get_running_loop()
            resident.expiry = loop.call_later(self.idle_s, expire, resident)
        self._changed()
        return over

    def remove(self, resident: Resident) -> bool:
        """Take ``resident`` out of the idle ones; whether it was there."""
        if resident not in self._idle:
            return False
        del self._idle[resident]
        if resident.expiry is not None:
            resident.expiry.cancel()
            resident.expiry = None
        self._changed()
        return True

    def _changed(self) -> None:
        warm = sorted({resident.key.warm_key for resident in self._idle})
        if warm == self._warm:
            return
        self._warm = warm
        for callback in self.on_change:
            with contextlib.suppress(Exception):
                callback()
