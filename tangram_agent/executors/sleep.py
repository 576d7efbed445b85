"""``sleep``: synthetic load that holds its allocation for a given time."""

from __future__ import annotations

import asyncio
import math
import time

from tangram_agent.executors.base import DEFAULT_OUTPUT_CAP, Outcome, PayloadError, cap_text
from tangram_agent.protocol import Assignment


class SleepExecutor:
    def __init__(self, *, output_cap: int = DEFAULT_OUTPUT_CAP) -> None:
        self.output_cap = output_cap

    async def execute(self, assignment: Assignment) -> Outcome:
        payload = assignment["payload"]
        try:
            seconds = payload.get("seconds", 0)
            exit_code = payload.get("exit_code", 0)
            stdout = payload.get("stdout", "")
            if not isinstance(seconds, int | float) or isinstance(seconds, bool):
                raise PayloadError("seconds must be a number")
            if not math.isfinite(seconds) or seconds < 0:
                raise PayloadError("seconds must be a finite number >= 0")
            if not isinstance(exit_code, int) or isinstance(exit_code, bool):
                raise PayloadError("exit_code must be an integer")
            if not isinstance(stdout, str):
                raise PayloadError("stdout must be a string")
        except PayloadError as exc:
            return Outcome.invalid(f"invalid payload: {exc}")
        started = time.time()
        timeout = assignment.get("timeout_s") or math.inf
        if seconds > timeout:
            await asyncio.sleep(timeout)
            return Outcome(
                state="timed_out",
                error=f"timed out after {timeout:g} s",
                started_at=started,
                finished_at=time.time(),
            )
        await asyncio.sleep(seconds)
        text, truncated = cap_text(stdout, self.output_cap)
        return Outcome(
            state="succeeded" if exit_code == 0 else "failed",
            exit_code=exit_code,
            stdout=text,
            stdout_truncated=truncated,
            error="" if exit_code == 0 else f"exited with code {exit_code}",
            started_at=started,
            finished_at=time.time(),
        )
