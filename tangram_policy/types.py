"""The policy's contract: plain frozen dataclasses in, a decision out.

The live scheduler (apps.scheduling) builds a ``Snapshot`` from Postgres, the
simulator (tangram_sim) builds one from its event queue; both hand it to the
same ``Policy.decide``. Nothing here imports Django.

Resources are ``Mapping[str, float]`` keyed by resource kind: ``cpu`` (cores),
``memory`` (MiB), ``gpu`` (devices), ``gpu_memory`` (MiB) and named API quotas
(``api:<name>``, in concurrent calls). A kind absent from a mapping is zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

Resources = Mapping[str, float]

#: Tolerance for float comparisons of resource amounts.
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Elasticity:
    """How an action scales with more units of ``unit_kind``.

    ``demand`` of a ``PendingAction`` is for ``min_units``; each extra unit adds
    ``demand[unit_kind] / min_units`` of that kind (other kinds stay fixed).
    Speedup follows Amdahl's law with ``parallel_fraction``.
    """

    min_units: int = 1
    max_units: int = 1
    parallel_fraction: float = 0.0
    unit_kind: str = "cpu"


@dataclass(frozen=True, slots=True)
class PendingAction:
    id: str
    tenant: str
    type: str
    demand: Resources
    submitted_at: float
    priority: int = 0
    job: str = ""
    trajectory: str = ""
    duration_hint_s: float | None = None
    #: The client's estimate of the run seconds (at minimum units) its trajectory
    #: will still submit after this action: 0 for its last. Ordered by with its own.
    remaining_hint_s: float | None = None
    #: How many actions its trajectory submitted before it (0: the first); None:
    #: not known. Without a ``remaining_hint_s``, what its trajectory still has to
    #: run is learned by this position and its type (``Snapshot.trajectory_stats``).
    position: int | None = None
    elasticity: Elasticity = field(default_factory=Elasticity)
    #: Warm-state keys that skip setup on a node that has them, e.g. ``image:python3``.
    affinity: frozenset[str] = frozenset()
    #: Actions sharing a key (e.g. a reward model) may be coalesced into one batch.
    batch_key: str | None = None
    #: Most members in one batch of ``batch_key`` (1: never batched).
    batch_limit: int = 1
    #: Seconds of setup a node without the ``affinity`` keys costs (image pull, model load).
    setup_s: float = 0.0
    #: Whether it runs as well on GPUs of different NVLink groups of its node
    #: (data-parallel work, e.g. an evaluation sweep): it may take, and grow
    #: into, free GPUs of any group. False keeps a multi-GPU action, and its
    #: growth, inside one group (tensor-parallel work).
    may_split_gpus: bool = False
    #: Whether its run can give GPUs above its minimum back while it runs
    #: (``Resizable.gpus``): its extra GPUs are lent, as extra cores are, so
    #: they may come out of other tenants' idle guarantees and keep no headroom.
    may_shrink_gpus: bool = False


@dataclass(frozen=True, slots=True)
class RunningAction:
    id: str
    tenant: str
    type: str
    node: str
    allocation: Resources
    started_at: float
    expected_end: float | None = None
    #: GPU ids held, where known (for topology-aware placement).
    gpus: tuple[str, ...] = ()


#: Unit kinds a running action's holding can change while it runs: a cgroup's
#: CPU quota can be raised or lowered at any time, memory and devices cannot.
#: The one exception, ``Resizable.gpus``: GPUs a run said it can give back.
RESIZABLE_KINDS = frozenset({"cpu"})


@dataclass(frozen=True, slots=True)
class Resizable:
    """A running elastic action whose units, of a kind in ``RESIZABLE_KINDS``, may change.

    It is also in ``Snapshot.running`` (or its tenant's usage): this only says
    what it holds, ``allocation[unit_kind] / units`` per unit, and how far it
    may go: back to ``min_units``, up to ``max_units``.

    An action of one GPU per unit whose run can give GPUs back while it runs
    (its clients said so: data-parallel shards that checkpoint) is listed too,
    with ``gpus``: its units may go down, never up.
    """

    action_id: str
    tenant: str
    node: str
    allocation: Resources
    units: int
    elasticity: Elasticity
    #: Its action type, whose learned duration tells how much work it has left.
    type: str = ""
    duration_hint_s: float | None = None
    #: Seconds of its run done so far, counted at its minimum units.
    done_s: float = 0.0
    #: Of a GPU action that can give GPUs back, the ids it holds (its minimum
    #: units' first), and the position of each one's group in its node's
    #: ``gpu_groups``, which list only free ids.
    gpus: tuple[str, ...] = ()
    gpu_groups: tuple[int, ...] = ()

    @property
    def min_units(self) -> int:
        return self.elasticity.min_units

    @property
    def unit_kind(self) -> str:
        return self.elasticity.unit_kind

    @property
    def unit(self) -> float:
        return self.allocation.get(self.unit_kind, 0.0) / self.units

    @property
    def extra(self) -> float:
        """What it holds of ``unit_kind`` above its minimum: what it could give back."""
        return (self.units - self.min_units) * self.unit


@dataclass(frozen=True, slots=True)
class Node:
    """A node offers ``type`` if ``type`` is in ``executors``."""

    id: str
    capacity: Resources
    #: Executor types this node runs (``sandbox.python``, ``sleep`` ...).
    executors: frozenset[str]
    #: Warm-state keys present on the node (images pulled, models resident).
    warm: frozenset[str] = frozenset()
    #: GPU ids grouped by interconnect (one tuple per NVLink/host group).
    gpu_groups: tuple[tuple[str, ...], ...] = ()
    #: GPUs in the node's largest group when all are free; 0: the largest of
    #: ``gpu_groups``. A view whose groups list only free ids (``Snapshot.capacity``)
    #: says it, so that an action larger than every group is known to need several.
    gpu_group_size: int = 0
    #: Warm keys the node keeps at most (LRU), 0: no bound known. Setting up a
    #: key on a node whose slots are all taken evicts one another action may need.
    warm_slots: int = 0
    #: Keys of ``warm`` still being set up (an image pull or a model load under
    #: way): an action placed here now would hold its units idle until that ends.
    #: The simulator knows; live, a key an action placed there was told to set up,
    #: for its ``setup_hint_s`` from the placement, unless the agent reports it ready.
    setting_up: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """A tenant's guarantee and limit per resource kind.

    The quota manages the kinds it names in ``guaranteed`` or ``limit``: a
    managed kind absent from ``guaranteed`` is guaranteed 0, one absent from
    ``limit`` is unlimited. A kind it names in neither bounds nothing, so a
    quota on cores alone guarantees actions that also ask for memory. A
    tenant absent from ``Snapshot.quotas`` has no guarantee and no limit.
    """

    tenant: str
    guaranteed: Resources
    limit: Resources
    weight: float = 1.0
    #: Per kind, how much of this tenant's idle guarantee borrowers may take
    #: (Kueue's ``lendingLimit``); a kind absent here is lent in full, 0 lends none.
    lending_limit: Resources = field(default_factory=dict)

    def guarantee_bounds(self, demand: Resources) -> tuple[tuple[str, float, float], ...] | None:
        """(kind, amount, guaranteed) for each managed kind ``demand`` asks for.

        None when it asks for some kind but for no managed one: no guarantee
        applies to it, and it borrows.
        """
        asked = [(kind, amount) for kind, amount in demand.items() if amount > 0]
        guaranteed = self.guaranteed
        limit = self.limit
        bounds = tuple(
            (kind, amount, guaranteed.get(kind, 0.0))
            for kind, amount in asked
            if kind in guaranteed or kind in limit
        )
        return None if asked and not bounds else bounds

    def idle(self, usage: Resources) -> dict[str, float]:
        """Per kind, the guarantee ``usage`` leaves unused."""
        out: dict[str, float] = {}
        for kind, amount in self.guaranteed.items():
            unused = amount - usage.get(kind, 0.0)
            if unused > 0:
                out[kind] = unused
        return out

    def unlent_idle(self, usage: Resources) -> dict[str, float]:
        """Per kind, the idle guarantee beyond the lending limit: borrowers leave it free."""
        out: dict[str, float] = {}
        for kind, lendable in self.lending_limit.items():
            unlent = self.guaranteed.get(kind, 0.0) - usage.get(kind, 0.0) - lendable
            if unlent > 0:
                out[kind] = unlent
        return out


@dataclass(frozen=True, slots=True)
class DurationStat:
    """Observed run durations for one (tenant, action type)."""

    count: int
    mean_s: float


@dataclass(frozen=True, slots=True)
class BatchStat:
    """Observed cost of batching one (tenant, action type): each member beyond the
    first adds ``marginal`` x one member's run time to the batch's."""

    count: int
    marginal: float


@dataclass(frozen=True, slots=True)
class TrajectoryStat:
    """What one (tenant, job)'s ended trajectories ran after each of their actions,
    by the action's position in its trajectory (0: a trajectory's first) and type.

    ``after[(k, type)] = (count, rest_s)``: ``count`` ended trajectories had an
    action of ``type`` at position ``k``, and ran ``rest_s`` seconds in all (at
    minimum units) after it. Keyed by type too, so that a trajectory's last call
    (its reward) has nothing after it even where longer trajectories go on.
    ``at[k]`` is the same over every type, for a type not yet seen at ``k``.
    """

    after: Mapping[tuple[int, str], tuple[int, float]]
    at: Mapping[int, tuple[int, float]]


@dataclass(frozen=True, slots=True)
class TypeLoad:
    """What one (tenant, action type) asks of its primary ``kind``, at minimum
    units: ``held`` by its running actions, ``queued`` by its pending ones, and
    ``mean_held``, what it held on average lately (``estimate.decayed_mean``)."""

    kind: str
    held: float
    queued: float
    mean_held: float
    #: The job (``PendingAction.job``) whose actions these are, also while none
    #: runs or waits; "" where they are several jobs' or none was named.
    job: str = ""
    #: One action's demand at minimum units, every kind ({}: unknown, only
    #: ``kind`` is kept for the type).
    demand: Resources = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[Node, ...]
    quotas: Mapping[str, TenantQuota]
    pending: tuple[PendingAction, ...]
    running: tuple[RunningAction, ...]
    duration_stats: Mapping[tuple[str, str], DurationStat] = field(default_factory=dict)
    #: Total pool capacity, when ``nodes`` lists only nodes with free room and
    #: their free room as ``capacity`` (the simulator does this); running actions
    #: on a node absent from ``nodes`` then count for tenant usage only.
    #: ``None``: the pool is ``nodes`` as given.
    capacity: Resources | None = None
    #: Running elastic actions whose units a round may change: take back extra
    #: units for actions that wait, or add units while the pool is idle. A
    #: policy may ignore them. Their nodes are in ``nodes``.
    resizable: tuple[Resizable, ...] = ()
    #: Per warm key, how many nodes hold it, listed in ``nodes`` or not (full
    #: ones): an action whose keys a full node holds may wait for its room
    #: rather than evict another key elsewhere. Empty: only listed nodes are known.
    warm_nodes: Mapping[str, int] = field(default_factory=dict)
    #: Per warm key, when an action last started with it on any node: an action
    #: that has waited long for its keys may evict keys nobody has used for a
    #: while. Empty: unknown, every key is in use.
    warm_used_at: Mapping[str, float] = field(default_factory=dict)
    #: Per (tenant, action type), what batching its actions has cost so far: a
    #: batch is formed only where it lowers their mean ACT. Absent: not yet
    #: observed, batch whenever there are more of them than free slots.
    batch_stats: Mapping[tuple[str, str], BatchStat] = field(default_factory=dict)
    #: Per (tenant, action type), its load: a round keeps room for a short type
    #: that held more lately than it asks now. Empty: unknown, none is kept.
    type_loads: Mapping[tuple[str, str], TypeLoad] = field(default_factory=dict)
    #: Per (tenant, job), what its trajectories ran after each position and type:
    #: an action without a ``remaining_hint_s`` is ordered by what its trajectory
    #: has left on average after its ``position`` and type. Empty: unknown, none is
    #: counted.
    trajectory_stats: Mapping[tuple[str, str], TrajectoryStat] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Placement:
    action_id: str
    node_id: str
    #: Total resources reserved on the node for this action.
    allocation: Resources
    units: int = 1
    #: Placements sharing a batch id run together as one execution; each member's
    #: allocation is its share of the batch's, which is one member's demand.
    batch_id: str | None = None
    #: GPU ids chosen for the action inside one interconnect group, where known.
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Resize:
    """Change the units of a running action (a ``Snapshot.resizable`` one)."""

    action_id: str
    node_id: str
    #: What the action holds from now on, and its units.
    allocation: Resources
    units: int
    #: The GPU ids it keeps, when it gives GPUs back (``Resizable.gpus``).
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    placements: tuple[Placement, ...] = ()
    #: Applied before the placements, whose room the shrinking ones free.
    resizes: tuple[Resize, ...] = ()


class Policy(Protocol):
    name: str

    def decide(self, snapshot: Snapshot) -> Decision: ...
