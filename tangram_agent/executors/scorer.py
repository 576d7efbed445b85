"""``reward.python``: score a batch of samples in one sandboxed run.

A payload names a scorer (``code``: Python defining ``score(samples)``, which
returns one JSON value per sample, and optional ``files``) and one ``sample``
(any JSON). The members of a batch that name the same scorer are scored by
one run of it with all their samples, in order: a reward model loads once and
can score them in one pass on the GPUs the batch holds. Each member's
``stdout`` is its score as JSON; the scorer's own prints go to ``stderr``,
which the members share. Members naming different scorers (rare: a batch key
usually names one) run one scorer after another in the batch's allocation.

The run is a ``sandbox.python`` run: the same isolation, limits and GPUs.
The scorer stays loaded between batches where it can
(:mod:`tangram_agent.executors.resident`), so a reward model loads once per
node, not once per batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tangram_agent.executors.base import Outcome, PayloadError, cap_text
from tangram_agent.executors.resident import COMPLAINT
from tangram_agent.executors.sandbox import Sandbox
from tangram_agent.protocol import Assignment, scorer_warm_key, whole_batch

#: The file the scorer's code is written to, next to the payload's own files.
SCORER_FILE = "scorer.py"


def scorer_key(payload: Mapping[str, Any]) -> str:
    """Which scorer a payload names (its code and files), checking the payload's shape."""
    code = payload.get("code")
    if not isinstance(code, str):
        raise PayloadError("code is required and must be a string")
    if "sample" not in payload:
        raise PayloadError("sample is required")
    files = payload.get("files", {})
    if not isinstance(files, dict):
        raise PayloadError("files must be an object of relative path to text")
    if SCORER_FILE in files:
        raise PayloadError(f"files: {SCORER_FILE!r} is the scorer's own")
    unknown = sorted(set(payload) - {"code", "sample", "files"})
    if unknown:
        raise PayloadError(f"{unknown[0]} is not a reward.python payload field")
    return json.dumps([code, files], sort_keys=True)


class ScorerExecutor:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def warm_keys(self) -> list[str]:
        return self.sandbox.residents.warm_keys()

    def warm_slots(self) -> int:
        return self.sandbox.residents.limit

    def watch_warm(self, callback: Callable[[], object]) -> None:
        self.sandbox.residents.on_change.append(callback)

    async def cool(self) -> None:
        await self.sandbox.end_residents()

    async def execute(self, assignment: Assignment) -> Outcome:
        """A batch of one."""
        (outcome,) = await self.execute_batch([assignment])
        return outcome

    async def execute_batch(self, assignments: Sequence[Assignment]) -> list[Outcome]:
        """One outcome per assignment, in order: one run per scorer named."""
        outcomes: list[Outcome | None] = [None] * len(assignments)
        scorers: dict[str, list[int]] = {}
        for position, assignment in enumerate(assignments):
            try:
                key = scorer_key(assignment["payload"])
            except PayloadError as exc:
                outcomes[position] = Outcome.invalid(f"invalid payload: {exc}")
                continue
            scorers.setdefault(key, []).append(position)
        for positions in scorers.values():
            scored = await self._score([assignments[position] for position in positions])
            for position, outcome in zip(positions, scored, strict=True):
                outcomes[position] = outcome
        return [outcome for outcome in outcomes if outcome is not None]

    async def _score(self, members: list[Assignment]) -> list[Outcome]:
        """Score the members' samples in one batch of their scorer, resident where it can be."""
        first = whole_batch(members[0])
        payload = first["payload"]
        files = {**payload.get("files", {}), SCORER_FILE: payload["code"]}
        # Without its tenant (a server before protocol 4) a scorer is never kept.
        tenant = first.get("tenant")
        warm_key = None
        if tenant is not None:
            warm_key = scorer_warm_key(tenant, payload["code"], payload.get("files", {}))
        run: Assignment = {
            **first,
            "timeout_s": max(float(member.get("timeout_s") or 0) for member in members),
        }
        cap = self.sandbox.settings.output_cap
        outcome = await self.sandbox.score(
            run,
            files,
            [member["payload"]["sample"] for member in members],
            warm_key=warm_key,
            stdout_cap=cap * len(members),
        )
        if outcome.state == "succeeded":
            scores = json.loads(outcome.stdout)
            return [self._scored(outcome, score) for score in scores]
        if outcome.stdout_truncated:
            error = f"the scores are over {cap} bytes of JSON per sample"
            return [replace(outcome, error=error)] * len(members)
        return [self._failed(outcome)] * len(members)

    def _scored(self, run: Outcome, score: Any) -> Outcome:
        text, truncated = cap_text(json.dumps(score) + "\n", self.sandbox.settings.output_cap)
        return replace(run, stdout=text, stdout_truncated=truncated)

    @staticmethod
    def _failed(run: Outcome) -> Outcome:
        """Every member fails as the run did, the scorer's last words in the error."""
        last = next((line for line in reversed(run.stderr.splitlines()) if line.strip()), "")
        if last.startswith(COMPLAINT):
            error = last.removeprefix(COMPLAINT)
        elif last and run.state == "failed":
            error = f"{run.error}: {last}"
        else:
            error = run.error
        return replace(run, stdout="", stdout_truncated=False, error=error)
