"""What the API returns, as frozen dataclasses: typed, hashable, safe to share."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
STATES = ("queued", "assigned", "running", "succeeded", "failed", "cancelled", "timed_out")


def _time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    return datetime.fromisoformat(str(value))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Action:
    id: str
    type: str
    state: str
    job: str = ""
    trajectory: str = ""
    #: Actions its trajectory submitted before it (0: the first); None without a trajectory.
    position: int | None = None
    priority: int = 0
    demand: dict[str, float] = field(default_factory=dict)
    timeout_s: float | None = None
    attempt: int = 0
    node: str | None = None
    #: What the placement holds: resources (with any extra elastic units), units, GPU ids.
    allocation: dict[str, float] = field(default_factory=dict)
    units: int = 1
    gpus: tuple[str, ...] = ()
    #: Shared by the actions placed together as one batch.
    batch_id: str | None = None
    #: Why a queued action is not placed yet (from ``get``/``list``); None otherwise.
    waiting: str | None = None
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    error: str = ""
    submitted_at: datetime | None = None
    assigned_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: Action completion time (finished - submitted), once finished.
    act_s: float | None = None
    #: The JSON as received, for fields this client version does not know yet.
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def ok(self) -> bool:
        return self.state == "succeeded"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Action:
        return cls(
            id=str(data["id"]),
            type=str(data.get("type", "")),
            state=str(data["state"]),
            job=data.get("job") or "",
            trajectory=data.get("trajectory") or "",
            position=data.get("position"),
            priority=int(data.get("priority") or 0),
            demand=dict(data.get("demand") or {}),
            timeout_s=_float(data.get("timeout_s")),
            attempt=int(data.get("attempt") or 0),
            node=data.get("node"),
            allocation=dict(data.get("allocation") or {}),
            units=int(data.get("units") or 1),
            gpus=tuple(data.get("gpus") or ()),
            batch_id=data.get("batch_id"),
            waiting=data.get("waiting"),
            exit_code=data.get("exit_code"),
            stdout=data.get("stdout") or "",
            stderr=data.get("stderr") or "",
            stdout_truncated=bool(data.get("stdout_truncated")),
            stderr_truncated=bool(data.get("stderr_truncated")),
            error=data.get("error") or "",
            submitted_at=_time(data.get("submitted_at")),
            assigned_at=_time(data.get("assigned_at")),
            started_at=_time(data.get("started_at")),
            finished_at=_time(data.get("finished_at")),
            act_s=_float(data.get("act_s")),
            raw=data,
        )


@dataclass(frozen=True)
class Quota:
    resource: str
    guaranteed: float
    limit: float
    weight: float
    #: The most of the idle guarantee other tenants may borrow; None: all of it.
    lending_limit: float | None = None


@dataclass(frozen=True)
class Tenant:
    """The caller's tenant: its quotas and what it uses now."""

    name: str
    quotas: tuple[Quota, ...]
    usage: dict[str, float]
    queued: int
    running: int
    #: Why the next queued action waits; None with none queued.
    waiting: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tenant:
        return cls(
            name=str(data["name"]),
            quotas=tuple(
                Quota(
                    resource=str(q["resource"]),
                    guaranteed=float(q["guaranteed"]),
                    limit=float(q["limit"]),
                    weight=float(q["weight"]),
                    lending_limit=None
                    if q.get("lending_limit") is None
                    else float(q["lending_limit"]),
                )
                for q in data.get("quotas") or []
            ),
            usage={k: float(v) for k, v in (data.get("usage") or {}).items()},
            queued=int(data.get("queued") or 0),
            running=int(data.get("running") or 0),
            waiting=data.get("waiting"),
        )


class TangramError(Exception):
    """An API error: HTTP ``status`` (None if the server was unreachable), ``detail``
    and per-field ``errors`` (``{"3.demand.cpu": ["..."]}`` for item 3 of a bulk submit).

    After a failed ``submit_many`` chunk, ``submitted`` holds the actions that
    earlier chunks did create.
    """

    def __init__(
        self,
        status: int | None,
        detail: str,
        errors: dict[str, list[str]] | None = None,
        submitted: list[Action] | None = None,
    ) -> None:
        self.status = status
        self.detail = detail
        self.errors = errors or {}
        self.submitted = submitted or []
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = f"{self.status or 'connection'}: {self.detail}"
        if self.errors:
            text += " " + "; ".join(f"{k}: {', '.join(v)}" for k, v in self.errors.items())
        return text


class ScoringError(Exception):
    """Some samples of a ``score`` call were not scored: ``failed`` holds their actions."""

    def __init__(self, failed: list[Action], total: int) -> None:
        self.failed = failed
        first = failed[0]
        super().__init__(
            f"{len(failed)} of {total} samples not scored; first, {first.id}: "
            f"{first.state}: {first.error}"
        )
