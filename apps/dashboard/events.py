"""The shapes the dashboard websocket sends, and nothing else.

The server sends one kind of frame: a full ``snapshot`` of what an operator
watches. Snapshots are idempotent, so a client that missed one (a reconnect,
a coalesced burst) is whole again with the next; the page never patches
state from deltas. Clients send nothing.

Frame::

    {"type": "snapshot", "snapshot": Snapshot}

Amounts are per resource kind (``cpu`` cores, ``memory`` MiB, ``gpu``
devices, ``gpu_memory`` MiB, ``api:<name>``); times are ISO 8601 in UTC.
A refused connection is closed with ``CLOSE_FORBIDDEN`` (4403) before any frame.
"""

from __future__ import annotations

from typing import Literal, TypedDict

#: Close code for a connection whose user is not allowed to watch the dashboard.
CLOSE_FORBIDDEN = 4403
#: At most this many placed actions are listed per node; ``actions_total`` has the count.
NODE_ACTIONS_CAP = 50


class PlacedActionView(TypedDict):
    id: str
    tenant: str
    type: str
    state: Literal["assigned", "running"]
    attempt: int
    units: int
    allocation: dict[str, float]
    gpus: list[str]
    #: The batch it was placed in ("" when alone) and how many members that batch has.
    batch_id: str
    batch_size: int
    assigned_at: str | None
    started_at: str | None


class NodeView(TypedDict):
    id: str
    name: str
    state: Literal["online", "offline", "draining"]
    last_seen_at: str
    capacity: dict[str, float]
    used: dict[str, float]
    free: dict[str, float]
    #: Warm-state keys the node's agent reports (resident scorers: ``scorer:<digest>``).
    warm: list[str]
    #: Warm keys it keeps at most (its agent's idle resident scorers); 0: no bound known.
    warm_slots: int
    #: Assigned and running actions, oldest assignment first, at most NODE_ACTIONS_CAP.
    actions: list[PlacedActionView]
    actions_total: int


class QuotaView(TypedDict):
    guaranteed: float
    limit: float
    #: The most of the idle guarantee others may borrow; None: all of it.
    lending_limit: float | None


class TenantView(TypedDict):
    name: str
    queued: int
    assigned: int
    running: int
    usage: dict[str, float]
    quotas: dict[str, QuotaView]
    #: Why its next queued action (highest priority, oldest) waits; None with none queued.
    waiting: str | None


class Totals(TypedDict):
    nodes: int
    nodes_online: int
    #: Capacity of online nodes, and what placed actions hold on them.
    capacity: dict[str, float]
    used: dict[str, float]
    queued: int
    assigned: int
    running: int


class Snapshot(TypedDict):
    server_time: str
    nodes: list[NodeView]
    tenants: list[TenantView]
    totals: Totals


class SnapshotFrame(TypedDict):
    type: Literal["snapshot"]
    snapshot: Snapshot


def snapshot_frame(snapshot: Snapshot) -> SnapshotFrame:
    return {"type": "snapshot", "snapshot": snapshot}
