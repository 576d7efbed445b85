"""The elastic, ACT-minimising Tangram policy.

One round, from a snapshot, in five passes:

1. **Batches.** Pending reward-scoring actions with the same ``batch_key``
   (and tenant and type) are coalesced, in order, into batches of up to
   ``batch_limit`` only when there are more of them than free slots for them
   (within their tenant's limit), and only as large as lowers their mean
   ACT: what a batch costs is learned
   (``Snapshot.batch_stats``: each member past the first adds a marginal
   fraction of one run; a prior of 0.25 until measured, and until one of the
   type has run alone, to measure against, the first in line runs alone), and
   below a marginal of 0.25 one wave of batches starts every member now; at or
   above it ``cheapest_batch`` sizes them. A batch is placed as one member's
   demand, shared evenly by its members.
2. **Order.** Shortest expected work first: the expected duration (hint, else
   learned per tenant and type, else a prior) plus what the client says its
   trajectory still has to run after it (``remaining_hint_s``: a trajectory's
   ACTs sum to its life less its think time, so the mean ACT is served by
   finishing the trajectories with the least left; without the hint, what
   its job's trajectories had left after its position and type, on average
   (``Snapshot.trajectory_stats``), up to ten times its job's queue's drain
   (``_add_learned_rests``)), scaled by
   ``2 ** -priority``, plus ``aging_rate`` x submit time. The key is fixed
   per action (a learned remainder moves as trajectories end and its job's
   queue drains, never past its job's longest), so an action can only be
   overtaken by actions submitted before ``submitted_at + (work + remaining) / aging_rate``:
   waits are bounded. A type nothing is known of (none has finished or runs, no hint)
   is probed: its first action in line is ordered as if it took no time.
3. **Quotas.** Actions within their tenant's guarantee are placed first, in
   order (cores its elastic actions hold above their minimum, which the
   round takes back where others wait, count only against actions whose
   primary kind is cores). The rest borrow idle capacity up to their
   limits, the tenant with the lowest dominant-resource share / weight
   first (Kueue-style fair sharing),
   never taking a non-lent idle guarantee. A guaranteed action that finds
   no room reserves its primary kind from borrowers whose tenant holds no
   guarantee of it, a starving one from everyone: on the nodes that run it
   (room elsewhere is no use to it), they take none of it for the rest of
   the round, so the capacity comes back to it as actions finish. A
   starving action that its own tenant's limit stops keeps the kind from
   its tenant's other actions, which would else take each unit that frees.
   Units nobody can take back (GPUs, memory, API quota) are held for
   shorter work: an action that its tenant's limit of such a kind stops
   keeps it for the round from its tenant's actions expected to run more
   than ``backfill_ratio`` times as long (they would hold it for their
   whole run); one that finds no room of it keeps it, on the nodes that
   run it, from those and from borrowers' such actions, until they have
   waited twice ``starvation_s`` or, if longer, their expected run over
   ``aging_rate`` (the order's own horizon for them); shorter ones still
   backfill. A head that
   its tenant's guarantee of such a kind stops (its own tenant's actions
   fill it) and that finds no room holds it so in the guarantee pass
   already: else its tenant's longer entries, within the guarantee as they
   need less, take each unit that frees first. Cores, which nobody takes
   back below an action's minimum, are kept for short work that is away:
   a tenant's actions expected to run more than ``keep_ratio`` times as
   long as one of its types leave, within its limit and the pool,
   ``keep_share`` times the cores that type held lately
   (``Snapshot.type_loads``) less what it holds and asks now, on the nodes
   that run it, and the rest of that type's demand (memory) in proportion,
   so that a task between steps finds its room when it comes back; a job
   whose own long type queues more than its nodes have free keeps no cores
   from that work for its own short types, and no job keeps the other kinds
   from its own long work. Likewise a tenant guaranteed a kind nobody takes
   back (GPUs) keeps, within what its guarantee has unused, the room its
   short types of it held lately from other tenants' long work borrowing it.
4. **Placement and elasticity.** Best fit on the primary kind, warm nodes
   (image pulled, model resident) first, then, where nodes keep few warm
   keys, a cold node with a free slot for the action's keys (rather than
   evict a key in use, thrashing, it waits for room on a node that holds its
   keys until it starves, unless every key it would evict holds two copies
   more than its own). A node still setting an action's keys up
   (``Node.setting_up``) gets no more actions of them: they would hold their
   units idle until the setup ends. They set the keys up on another node
   with a free slot (a second copy, where that leaves a slot for every key
   nobody holds) or wait, a guaranteed one keeping its room for the round
   (its tenant's work that needs no setup and ends within it runs there);
   multi-GPU actions inside one interconnect group;
   while nobody waits for its unit kind, an elastic action goes instead to
   the fitting node with the most room, since its extra units must come from
   its own node. Then the room left over goes, by largest expected seconds
   saved (Amdahl), to extra units of placed elastic actions and of running
   ones whose units can change (cores: ``Decision.resizes`` grows them), but
   only for kinds nobody is waiting on (cores, which come back when needed,
   grow on any node where no waiting action would fit but for cores: one
   that waits for memory keeps no cores idle), keeping a headroom, and only while
   each unit cuts enough of the action's time for the current load (EARL's
   rule: ``min_gain x load / (1 - load)``). The headroom is for
   arrivals, so it does not apply to units the round takes back when others
   need them (cores, with pass 5 on); the load rule, which weighs a unit's
   worth against what it costs the pool, does, except for running actions:
   they take idle cores whatever the load (they give them back as soon as
   others wait; holding the rule on them lost 0.5-5% mean ACT, and on new
   placements too it cost the 10k-action round 9% more instructions for the
   same gain). Units that cannot be taken
   back (GPUs) never come out of another tenant's idle guarantee: that
   tenant could not have it back until the action ends. A running action's
   work left is its learned duration less what it has done, but at least as
   much again as it has done (durations have long tails).
5. **Taking units back.** Units are not fixed at placement: when actions
   that ask for a kind running actions can give back (cores) find no room, or
   their tenant's limit, the round lends them the units running elastic
   actions hold above their minimum, places them again, and takes back
   (``Decision.resizes``) only the units they were placed on. An elastic
   action grows while the pool is idle and shrinks towards its minimum when
   others wait.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import NamedTuple

from tangram_policy.estimate import (
    duration_at,
    expected_duration,
    expected_marginal,
    expected_work,
    learned_rest,
    observed_work,
    type_priors,
)
from tangram_policy.pool import (
    _NO_KEYS,
    _NO_USAGE,
    BEST_FIT,
    MOST_COPIES,
    MOST_ROOM,
    Caps,
    Index,
    Plan,
    Pool,
    primary_kind,
)
from tangram_policy.types import (
    EPSILON,
    RESIZABLE_KINDS,
    Decision,
    Elasticity,
    PendingAction,
    Placement,
    Resizable,
    Resize,
    Resources,
    Snapshot,
    TypeLoad,
)

#: An action that has waited its setup time may evict keys unused and not waited
#: for during this fraction of its wait (``_Round._waits``).
EVICT_WAIT_RATIO = 0.25

#: Below this expected marginal, one wave of batches, every member starting now:
#: batch as many as it takes. At or above it, the size that ends the queued
#: members soonest (``cheapest_batch``). Below it, one wave ends the queue's
#: members at most a quarter later on average than that size would (limit 32, one
#: free slot), and its larger batches score more members per slot-second for
#: those still to come: sizing there too cost rm 1.1% mean ACT. Above it, one
#: wave costs fast: at 0.5, a wave of 32 on one slot ends its members after 16.5
#: runs on average, batches of 4 or 8 after 11.25.
BATCHING_PAYS_BELOW = 0.25

_PlacementMaker = Callable[[str, str, Resources, int, str | None, tuple[str, ...]], Placement]


def _placement_maker() -> _PlacementMaker:
    """``Placement(...)`` at about half the cost, for a round's thousands of placements.

    A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; this sets Placement's slots through their
    descriptors instead, which gives the same object (type, fields, equality,
    hash). Should Placement's fields change or gain a ``__post_init__``, it
    falls back to the class itself.
    """
    names = ("action_id", "node_id", "allocation", "units", "batch_id", "gpus")
    if tuple(f.name for f in fields(Placement)) != names or hasattr(Placement, "__post_init__"):
        return Placement
    slots = vars(Placement)
    set_action, set_node, set_allocation, set_units, set_batch, set_gpus = (
        slots[name].__set__ for name in names
    )
    new = object.__new__

    def placement(
        action_id: str,
        node_id: str,
        allocation: Resources,
        units: int,
        batch_id: str | None,
        gpus: tuple[str, ...],
    ) -> Placement:
        made = new(Placement)
        set_action(made, action_id)
        set_node(made, node_id)
        set_allocation(made, allocation)
        set_units(made, units)
        set_batch(made, batch_id)
        set_gpus(made, gpus)
        return made

    return placement


_placement = _placement_maker()


@dataclass(frozen=True, slots=True)
class TangramConfig:
    """Each switch turns one mechanism off for an ablation."""

    ordering: bool = True
    fair_share: bool = True
    affinity: bool = True
    topology: bool = True
    elastic: bool = True
    batching: bool = True
    shrinking: bool = True
    #: Running elastic actions take more units (of kinds taken back) while the pool is idle.
    growing: bool = True
    #: An action whose client gives no ``remaining_hint_s`` is ordered by what its
    #: trajectory had left after its position and type on average
    #: (``Snapshot.trajectory_stats``).
    learned_rest: bool = True
    #: A learned rest counts at most this many times the seconds its job's queued
    #: work takes to drain the pool (0: no cap). See ``_add_learned_rests``.
    rest_drain_ratio: float = 10.0
    #: Seconds of ordering key an action gains per second it waits. At 0.5, one
    #: tenant's long GPU jobs that had waited twice their length went ahead of its
    #: fresh judge calls on GPUs nobody takes back, and shortest-first became
    #: first-come (bench/HISTORY.md, "Slower aging").
    aging_rate: float = 0.25
    #: An action that has waited this long reserves its kind when it does not fit.
    starvation_s: float = 300.0
    #: Fraction of each kind's pool that extra elastic units leave free for arrivals
    #: (kinds that are not taken back).
    headroom: float = 0.1
    #: Smallest fraction of its time an extra unit must save, at half load.
    min_gain: float = 0.05
    #: Entries expected to run more than this many times as long as a head that
    #: finds no room of a kind never taken back (GPUs, memory, API quota), or
    #: that its tenant's limit of it stops, leave that kind for the round (0: off).
    backfill_ratio: float = 3.0
    #: Room a tenant's entries expected to run more than ``keep_ratio`` times as
    #: long as one of its types leave that type, of a kind taken back (cores):
    #: ``keep_share`` times what it held on average lately, less what it holds
    #: and has queued now (``Snapshot.type_loads``; 0: off), and the rest of its
    #: demand in proportion. See ``_Round._keeps``; ``_Round._guards`` keeps so
    #: a tenant's idle guarantee of GPUs from other tenants' long work.
    keep_share: float = 2.0
    keep_ratio: float = 20.0


Shape = tuple[str, frozenset[str], tuple[tuple[str, float], ...], bool]
#: The nodes that offer an action type (``Pool.offering``).
Offering = tuple[str, ...]
#: One schedulable unit: (key, first action id, expected work s, first action,
#: earliest submit, members of a batch: () for a single action).
Entry = tuple[float, str, float, PendingAction, float, tuple[PendingAction, ...]]


class _Class:
    """Pending entries that share tenant, type, affinity and demand, in key order.

    They all fit or all fail on the same room, and a tenant's usage only grows
    within a round: once one fails its guarantee, limit or room, the rest of
    its class would too, so a round skips them together instead of one by one.
    What every placement of the class needs is worked out once, here.
    """

    __slots__ = (
        "entries",
        "position",
        "tenant",
        "type",
        "affinity",
        "demand",
        "kind",
        "shape",
        "needs",
        "need",
        "gpus_needed",
        "split_gpus",
        "shrinks_gpus",
        "guarantee",
        "limit",
        "warm",
        "anywhere",
        "unguaranteed",
        "batched",
        "gains",
        "plan",
        "holds_seen",
        "held_over",
        "held_over_borrowing",
        "offering",
        "roomiest",
    )

    def __init__(
        self, head: PendingAction, demand: Resources, shape: int, pool: Pool, batched: bool = False
    ) -> None:
        self.entries: list[Entry] = []
        self.position = 0
        self.tenant = head.tenant
        self.type = head.type
        self.affinity = head.affinity
        self.demand = demand
        self.kind = primary_kind(demand)
        #: Classes of one shape (type, affinity, demand) find room or fail together.
        self.shape = shape
        self.needs = tuple((kind, amount) for kind, amount in demand.items() if amount > 0)
        self.need = demand.get(self.kind, 0.0)
        self.gpus_needed = int(round(demand.get("gpu", 0.0)))
        self.split_gpus = head.may_split_gpus
        self.shrinks_gpus = head.may_shrink_gpus
        self.guarantee = pool.guarantee_caps(head.tenant, demand)
        self.limit = pool.limit_caps(head.tenant, demand)
        quota = pool.quotas.get(head.tenant)
        guaranteed = quota.guaranteed if quota is not None else {}
        #: Kinds it needs that its tenant holds no guarantee of: only those a
        #: guaranteed action's reservation keeps it from when it borrows.
        self.unguaranteed = frozenset(
            kind for kind, _ in self.needs if guaranteed.get(kind, 0.0) <= 0
        )
        #: The node indexes placements try (nodes warm with its affinity, any node), once needed.
        self.warm: Index | None = None
        self.anywhere: Index | None = None
        #: A batch group: its entries' actions may differ in affinity.
        self.batched = batched
        #: The gain group of its latest placed growable action.
        self.gains: _GainGroup | None = None
        self.plan = pool.plan(demand)
        #: Entries expected to run longer are held this round (``_Round._see_holds``,
        #: as the round's holds stood at its count ``holds_seen``): guaranteed, borrowing.
        self.holds_seen = 0
        self.held_over = math.inf
        self.held_over_borrowing = math.inf
        #: The nodes that run it: room it waits for is held only there.
        self.offering = pool.offering(head.type)
        #: How ``Pool.find`` looks for room for it to grow, where it may grow:
        #: by copies of it where it is heavier than the pool in some kind.
        self.roomiest = MOST_COPIES if pool.heavier_than_pool(demand, self.kind) else MOST_ROOM

    def head_key(self) -> tuple[float, str]:
        entry = self.entries[self.position]
        return entry[0], entry[1]


class _Target:
    """Where pending actions alike go: their class's (or batch group's) entries."""

    __slots__ = ("entries", "learned_s", "unseen", "kind", "need")

    def __init__(self, entries: list[Entry], demand: Resources) -> None:
        self.entries = entries
        self.kind = primary_kind(demand)
        self.need = demand.get(self.kind, 0.0)
        #: The learned duration estimate, once needed (-1: not yet).
        self.learned_s = -1.0
        #: No action of its tenant and type (nor of its type) has finished, and
        #: none runs: its first in line probes the type (``TangramPolicy._unseen``).
        self.unseen = False


class _Kept(NamedTuple):
    """Room of ``kind`` a tenant keeps for its short ``type`` (``_Round._keeps``,
    ``_Round._guards``)."""

    type: str
    kind: str
    amount: float
    #: Expected work above which an entry leaves it.
    bound: float
    #: The job whose type it is ("": several or unknown; ``TypeLoad.job``).
    job: str


class _GainGroup:
    """Placed single actions of one class whose extra units gain alike: equal
    elasticity, demand, expected work and setup. ``expand`` works their first
    unit's gain out once for all of them, and what else it needs of an action
    (tenant, unit, id, node, GPUs) is here or in its placement. A running
    action that may grow is a group of its own, with no placements.
    """

    __slots__ = (
        "tenant",
        "allocation",
        "alike",
        "elasticity",
        "demand",
        "work_s",
        "fixed_s",
        "split_gpus",
        "shrinks_gpus",
        "outs",
    )

    def __init__(
        self,
        tenant: str,
        allocation: Resources,
        elasticity: Elasticity,
        demand: Resources,
        work_s: float,
        fixed_s: float,
        split_gpus: bool = False,
        shrinks_gpus: bool = False,
    ) -> None:
        # Not the class itself: it holds this group, and a cycle would outlive the round.
        self.tenant = tenant
        #: What each member was placed with (the class's demand).
        self.allocation = allocation
        self.alike = (elasticity, demand, work_s, fixed_s)
        self.elasticity = elasticity
        self.demand = demand
        self.work_s = work_s
        #: Seconds before the run that more units do not shorten (setup on a cold node).
        self.fixed_s = fixed_s
        #: Whether its extra GPUs may come from any group (``PendingAction.may_split_gpus``).
        self.split_gpus = split_gpus
        #: Whether its extra GPUs are lent (``PendingAction.may_shrink_gpus``, and
        #: the round takes units back).
        self.shrinks_gpus = shrinks_gpus
        #: Where the members' placements are in the round's output, in order.
        self.outs: list[int] = []


class _Grown:
    """The units, GPUs and extra resources ``expand`` gave a placed action."""

    __slots__ = ("group", "units", "gpus", "extra")

    def __init__(self, group: _GainGroup, units: int, gpus: tuple[str, ...]) -> None:
        self.group = group
        self.units = units
        self.gpus = gpus
        self.extra: dict[str, float] = {}


class TangramPolicy:
    name = "tangram"

    def __init__(self, config: TangramConfig | None = None, name: str | None = None) -> None:
        self.config = config or TangramConfig()
        if name is not None:
            self.name = name

    def decide(self, snapshot: Snapshot) -> Decision:
        if not snapshot.nodes or not (snapshot.pending or self._may_grow(snapshot)):
            return Decision()
        collecting = gc.isenabled()
        gc.disable()  # see _decide
        try:
            return self._decide(snapshot)
        finally:
            if collecting:
                gc.enable()

    def _decide(self, snapshot: Snapshot) -> Decision:
        """The round, with the cyclic garbage collector held off (``decide``).

        A large round allocates ~10^5 short-lived tuples and records, none in
        reference cycles (reference counting frees them). Left on, the
        collector would run over and over during the round, each pass walking
        the snapshot and whatever the caller holds, for 10-20% of the round's
        time and nothing to collect.
        """
        config = self.config
        pool = Pool(snapshot, topology=config.topology)
        round_ = _Round(pool, config, snapshot.now)
        if config.keep_share > 0 and snapshot.type_loads:
            round_.kept, round_.guarded = self._kept(snapshot)
            round_.type_loads = snapshot.type_loads
        classes = self._classes(snapshot, pool)
        round_.place(classes)
        if config.shrinking and snapshot.resizable:
            round_.take_back(snapshot.resizable, classes)
        if config.elastic:
            round_.expand(self._growable(snapshot, round_))
        return Decision(placements=tuple(round_.placements()), resizes=tuple(round_.resizes))

    def _add_learned_rests(
        self,
        learned: list[tuple[list[Entry], int, float]],
        queued: Mapping[tuple[str, str], Mapping[str, float]],
        capacity: Mapping[str, float],
    ) -> None:
        """Add each entry's learned rest to its key (scaled by priority), at most
        ``rest_drain_ratio`` times its job's drain: the seconds the pool would take
        to run the job's queued work (expected seconds x units of each kind over
        the pool's capacity of it; the longest kind's).

        The learned rest is an average over the job's ended trajectories, so it
        cannot tell a trajectory that is behind from one that is ahead: uncapped, the job's
        slowest trajectories go last and its step waits for them (fragment's
        step 0.92x). Early in a step the job's queue is long and the cap loose;
        once only its stragglers queue, they go by their own work. At 10x,
        over the shipped workloads, the mean ACT gains 1.36% instead of 1.40%
        and the mean step loses 0.87% instead of 1.23% (fragment's 0.96x);
        at 1x to 5x more of each. A client's ``remaining_hint_s`` is not
        capped: capping it cost campus and reclaim 7% mean ACT with hints.
        """
        ratio = self.config.rest_drain_ratio
        caps: dict[tuple[str, str], float] = {}
        for entries, index, rest in learned:
            key, action_id, work, action, submitted, members = entries[index]
            job = (action.tenant, action.job)
            cap = caps.get(job)
            if cap is None:
                drain = max(
                    (
                        amount / capacity[kind]
                        for kind, amount in queued[job].items()
                        if capacity.get(kind, 0.0) > 0
                    ),
                    default=0.0,
                )
                cap = caps[job] = ratio * drain
            scaled = min(rest, cap) * 2.0 ** (-action.priority)
            entries[index] = (key + scaled, action_id, work, action, submitted, members)

    def _classes(self, snapshot: Snapshot, pool: Pool) -> list[_Class]:
        config = self.config
        stats = snapshot.duration_stats
        batch_stats = snapshot.batch_stats
        priors = type_priors(stats)
        classes: dict[tuple[object, ...], _Class] = {}
        shapes: dict[Shape, int] = {}
        signatures: dict[int, tuple[tuple[str, float], ...]] = {}
        #: Batchable entries by key, tenant, type and GPU flags: a batch's class takes
        #: its head's flags, so one member that may split or shrink its GPUs must not
        #: lend them to another that may not.
        batchable: dict[tuple[str, str, str, bool, bool], list[Entry]] = {}
        #: Where an action's entry goes, by what decides it (demand by identity).
        targets: dict[tuple[object, ...], _Target] = {}
        aging = config.aging_rate
        ordering = config.ordering
        batching = config.batching
        #: Per unseen (tenant, type), its first action's entry: (list, position).
        probes: dict[tuple[str, str], tuple[list[Entry], int]] = {}
        trajectory_stats = snapshot.trajectory_stats if config.learned_rest else {}
        #: Per (tenant, job), its queued seconds x units per primary kind (while
        #: any learned rest may be capped by it), and the entries whose learned
        #: rest is added once all are counted: (entries, index, rest).
        queued: dict[tuple[str, str], dict[str, float]] = {}
        learned: list[tuple[list[Entry], int, float]] = []
        capping = bool(trajectory_stats) and config.rest_drain_ratio > 0
        for action in snapshot.pending:
            demand = action.demand
            spec = (
                id(demand),
                action.tenant,
                action.type,
                action.affinity,
                action.batch_key,
                action.batch_limit,
                action.may_split_gpus,
                action.may_shrink_gpus,
            )
            target = targets.get(spec)
            if target is None:
                tenant = action.tenant
                if batching and action.batch_key is not None and action.batch_limit > 1:
                    batch = (
                        action.batch_key,
                        tenant,
                        action.type,
                        action.may_split_gpus,
                        action.may_shrink_gpus,
                    )
                    entries = batchable.setdefault(batch, [])
                else:
                    signature = signatures.get(id(demand))
                    if signature is None:
                        signature = signatures[id(demand)] = tuple(sorted(demand.items()))
                    split = action.may_split_gpus
                    class_key = (
                        tenant,
                        action.type,
                        action.affinity,
                        signature,
                        split,
                        action.may_shrink_gpus,
                    )
                    cls = classes.get(class_key)
                    if cls is None:
                        shape = shapes.setdefault(
                            (action.type, action.affinity, signature, split), len(shapes)
                        )
                        cls = classes[class_key] = _Class(action, demand, shape, pool)
                    entries = cls.entries
                target = targets[spec] = _Target(entries, demand)
            if action.duration_hint_s is None:
                work = target.learned_s
                if work < 0:  # not yet worked out (it is the same for the tenant and type)
                    work = target.learned_s = expected_duration(action, stats, priors)
                    target.unseen = ordering and self._unseen(action, snapshot, priors)
            else:
                work = expected_duration(action, stats, priors)
            submitted = action.submitted_at
            entries = target.entries
            if capping:
                job = (action.tenant, action.job)
                volumes = queued.get(job)
                if volumes is None:
                    volumes = queued[job] = {}
                volumes[target.kind] = volumes.get(target.kind, 0.0) + work * target.need
            if ordering:
                priority = action.priority
                rest = action.remaining_hint_s  # what its trajectory runs after it
                if rest is None and trajectory_stats and action.position is not None:
                    ended = trajectory_stats.get((action.tenant, action.job))
                    rest = (
                        0.0 if ended is None else learned_rest(ended, action.position, action.type)
                    )
                    if capping and rest > 0.0:
                        learned.append((entries, len(entries), rest))
                        rest = 0.0
                left = work + rest if rest is not None and rest > 0.0 else work
                scaled = left if priority == 0 else left * 2.0 ** (-priority)
                key = scaled + aging * submitted
            else:
                key = submitted - 1e9 * action.priority
            if target.unseen and action.duration_hint_s is None:
                pair = (action.tenant, action.type)
                probe = probes.get(pair)
                if probe is None or (submitted, action.id) < _arrival_order(probe[0][probe[1]]):
                    probes[pair] = (entries, len(entries))
            entries.append((key, action.id, work, action, submitted, ()))
        if learned:
            self._add_learned_rests(learned, queued, pool.total)
        for entries, position in probes.values():
            _, action_id, work, action, submitted, members = entries[position]
            entries[position] = (aging * submitted, action_id, work, action, submitted, members)
        out = list(classes.values())
        for cls in out:
            cls.entries.sort()
        for entries in batchable.values():
            entries.sort()
            head = entries[0][3]
            stat = batch_stats.get((head.tenant, head.type))
            size = self._batch_size(pool, head, len(entries), expected_marginal(stat))
            largest: dict[str, float] = {}
            # Members mostly share demand objects; a repeat cannot change a maximum.
            demands = {id(entry[3].demand): entry[3].demand for entry in entries}
            for demand in demands.values():
                for kind, amount in demand.items():
                    largest[kind] = max(largest.get(kind, 0.0), amount)
            shape = shapes.setdefault(
                (head.type, head.affinity, tuple(sorted(largest.items())), head.may_split_gpus),
                len(shapes),
            )
            cls = _Class(head, largest, shape, pool, batched=True)
            if size == 1:  # a batch of one is the entry itself
                cls.entries = entries
                out.append(cls)
                continue
            # Until one of the type has run alone, no batch of it can be measured
            # (``batch_update``) and the prior would stay: the first in line runs alone.
            alone = stat is None and observed_work(head.tenant, head.type, stats, priors) is None
            start = 0
            while start < len(entries):
                end = start + (1 if alone and start == 0 else size)
                chunk = entries[start:end]
                start = end
                first = chunk[0]
                cls.entries.append(
                    (
                        first[0],
                        first[1],
                        max([e[2] for e in chunk]),
                        first[3],
                        min([e[4] for e in chunk]),
                        tuple([e[3] for e in chunk]),
                    )
                )
            out.append(cls)
        return out

    @staticmethod
    def _unseen(action: PendingAction, snapshot: Snapshot, priors: Mapping[str, float]) -> bool:
        """Whether nothing is known of how long actions of ``action``'s tenant and type
        run: none has finished (of its type, for any tenant) and none runs.

        Its first in line then probes the type: it is ordered as if it took no
        time, and once it ends, the type's actions are ordered by what it took.
        Ordered by the cold-start prior instead, a type shorter than what
        queues waits as if it were 10 s long until aging lets one of its
        actions run (bursty: its 0.4 s reward checks behind 2.9 s Python
        calls). Only its place in the queue changes: the holds for shorter
        work, the room kept and extra units still count it at the prior
        (counted as taking no time, it took extra GPUs from gpuburst's reward
        calls). A probe risks one action's units per tenant and type at a time.
        """
        if observed_work(action.tenant, action.type, snapshot.duration_stats, priors) is not None:
            return False
        load = snapshot.type_loads.get((action.tenant, action.type))
        return load is None or load.held <= 0

    def _kept(self, snapshot: Snapshot) -> tuple[dict[str, list[_Kept]], list[tuple[str, _Kept]]]:
        """The room kept for short types: per tenant, of cores and the rest of their
        demand, from its own long work (``_Round._keeps``); and per tenant
        guaranteed a kind nobody takes back, of that kind, from borrowers
        (``_Round._guards``)."""
        config = self.config
        stats = snapshot.duration_stats
        kept: dict[str, list[_Kept]] = {}
        guarded: list[tuple[str, _Kept]] = []
        for (tenant, action_type), load in snapshot.type_loads.items():
            stat = stats.get((tenant, action_type))
            if stat is None:
                continue
            amount = config.keep_share * load.mean_held - load.held - load.queued
            if amount <= EPSILON:
                continue
            bound = stat.mean_s * config.keep_ratio
            row = _Kept(action_type, load.kind, amount, bound, load.job)
            if load.kind not in RESIZABLE_KINDS:
                quota = snapshot.quotas.get(tenant)
                if quota is not None and quota.guaranteed.get(load.kind, 0.0) > 0:
                    guarded.append((tenant, row))
                continue
            rows = kept.setdefault(tenant, [])
            rows.append(row)
            per_action = load.demand.get(load.kind, 0.0)
            for kind, need in load.demand.items():  # the rest of its demand, in proportion
                if kind != load.kind and need > 0 and per_action > 0:
                    share = amount * need / per_action
                    rows.append(_Kept(action_type, kind, share, bound, load.job))
        return kept, guarded

    def _may_grow(self, snapshot: Snapshot) -> bool:
        """Whether a running action could take more units (only of a kind taken back)."""
        config = self.config
        return (
            config.elastic
            and config.growing
            and config.shrinking
            and any(
                held.elasticity.max_units > held.units and not held.gpus
                for held in snapshot.resizable
            )
        )

    def _growable(self, snapshot: Snapshot, round_: _Round) -> list[tuple[Resizable, float]]:
        """Running actions that may grow, each with its expected work left at its minimum:
        its expected work less what it has done, but at least as much again as it
        has done (durations have long tails; the longer a run has gone, the longer
        it is likely to go on). An overestimate costs little: units of these
        kinds are taken back as soon as others wait.
        """
        if not self._may_grow(snapshot):
            return []
        shrunk = {resize.action_id for resize in round_.resizes}
        stats = snapshot.duration_stats
        priors = type_priors(stats)
        out = []
        for held in snapshot.resizable:
            if held.elasticity.max_units <= held.units or held.action_id in shrunk:
                continue
            if held.unit_kind not in RESIZABLE_KINDS or held.node not in round_.pool.free:
                continue
            if held.duration_hint_s is not None and held.duration_hint_s >= 0:
                work = held.duration_hint_s
            else:
                work = expected_work(held.tenant, held.type, stats, priors)
            out.append((held, max(work - held.done_s, held.done_s)))
        return out

    @staticmethod
    def _batch_size(pool: Pool, action: PendingAction, count: int, marginal: float) -> int:
        """Batch only as much as needed for every member to start now and, unless a
        batch costs little (``marginal``), only as much as lowers their mean ACT."""
        limit = action.batch_limit
        if count <= 1 or limit <= 1:
            return 1
        kind = primary_kind(action.demand)
        need = action.demand.get(kind, 0.0)
        if need <= 0:
            return 1
        # The slots its tenant's limit allows count, not every free one (rm on 2.5
        # times its pool, its tenant limited to the 8 GPUs it had: batches sized
        # for 20 free GPUs, of which 8 ran; mean ACT 48.0 s against 40.2 s).
        usage = pool.usage.get(action.tenant, _NO_USAGE)
        allowed = min(
            (
                int(max(ceiling - usage.get(limited, 0.0), 0.0) / amount + 1e-9)
                for limited, amount, ceiling in pool.limit_caps(action.tenant, action.demand)
            ),
            default=count,
        )
        slots = 0
        for node_id in pool.listed(pool._index(action.type, frozenset(), kind)):
            slots += int(pool.free[node_id].get(kind, 0.0) / need + 1e-9)
            if slots >= allowed or slots >= count:
                break
        slots = min(slots, allowed)
        if slots >= count:
            return 1
        size = min(limit, math.ceil(count / max(slots, 1)))
        if marginal < BATCHING_PAYS_BELOW or slots == 0:
            return size
        return cheapest_batch(count, slots, size, marginal)


def cheapest_batch(count: int, slots: int, largest: int, marginal: float) -> int:
    """The batch size, up to ``largest``, that ends ``count`` queued members soonest
    on average on ``slots`` free slots.

    Batches of ``b`` go in ``ceil(count / (slots * b))`` waves of ``1 + marginal
    * (b - 1)`` runs each, and a member ends, on average, after ``(waves + 1) /
    2`` of them. Below a marginal of 0.5, one wave beats a queue of single
    runs; above it, a queue of single runs or of smaller batches beats one
    wave. Ties go to the larger batch, which scores more members per slot-second.
    """
    best, best_cost = 1, math.inf
    for size in range(1, largest + 1):
        waves = math.ceil(count / (slots * size))
        cost = (1.0 + marginal * (size - 1)) * (waves + 1)
        if cost <= best_cost + EPSILON:
            best, best_cost = size, cost
    return best


def _arrival_order(entry: Entry) -> tuple[float, str]:
    """First come, first served: an entry's submit time, then its action's id."""
    return entry[4], entry[1]


def _reserve(reserved: dict[str, list[Offering]], kind: str, where: Offering) -> None:
    """Hold ``kind`` on the nodes ``where`` for the round."""
    places = reserved.setdefault(kind, [])
    if not any(place is where for place in places):
        places.append(where)


class _Round:
    def __init__(self, pool: Pool, config: TangramConfig, now: float) -> None:
        self.pool = pool
        self.config = config
        self.now = now
        #: The round's placements, in order, built as entries are placed (data at hand).
        self.out: list[Placement] = []
        #: Placed single actions that may take more units than their minimum, by gain group.
        self.gain_groups: list[_GainGroup] = []
        #: Whether one of them lends its extra GPUs (``_GainGroup.shrinks_gpus``).
        self.lends_gpus = False
        #: Shapes that found no room: room only shrinks within a round.
        self.no_room: set[int] = set()
        #: Kinds some action waits for, with the nodes it runs on: later actions
        #: (all / borrowers) that run on any of those nodes leave them.
        self.reserved_all: dict[str, list[Offering]] = {}
        self.reserved_from_borrowers: dict[str, list[Offering]] = {}
        #: Kinds never taken back a head found no room of (held, on the nodes it
        #: runs on, from its tenant: key (tenant, kind), and from borrowers: key
        #: (None, kind)) or its tenant's limit stopped (held from its tenant on
        #: every node: place None): entries expected to run longer than the
        #: bound leave them this round (``_hold_from_longer``).
        self.held_from_longer: dict[tuple[str | None, str], dict[Offering | None, float]] = {}
        #: The same, per (tenant, kind), for the guarantee pass only
        #: (``_hold_for_guaranteed``).
        self.held_in_guarantee: dict[tuple[str | None, str], dict[Offering | None, float]] = {}
        #: How many times ``held_from_longer`` or ``held_in_guarantee`` changed: a
        #: class works its bounds out again only then (``_see_holds``), not at each
        #: placement.
        self.holds = 0
        #: Kinds some action found no room of, with the classes short of each:
        #: extra elastic units leave them, but for lent units on a node where
        #: none of those classes fits in its other kinds (``_wanted_on``).
        self.contended: dict[str, list[_Class]] = {}
        self.elastic = config.elastic  # read once per placement
        self.resizes: list[Resize] = []
        #: (tenant, kind) a borrower found its tenant's limit of.
        self.limited: set[tuple[str, str]] = set()
        #: (tenant, kind) a starving class waits for within its tenant's limit.
        self.held_by_starving: dict[tuple[str, str], _Class] = {}
        #: Placing into units lent by running actions (``take_back``).
        self.lending = False
        #: Shapes that found room only on nodes still setting their keys up.
        self.setup_only: set[int] = set()
        #: Per tenant, room kept for its short types (``TangramPolicy._kept``).
        self.kept: dict[str, list[_Kept]] = {}
        #: Per tenant guaranteed a kind nobody takes back, room kept for its short
        #: types of it from borrowers (``TangramPolicy._kept``).
        self.guarded: list[tuple[str, _Kept]] = []
        #: ``Snapshot.type_loads``, where room is kept: a job saturated by its own type.
        self.type_loads: Mapping[tuple[str, str], TypeLoad] = {}
        #: Per tenant, room its guaranteed entries keep on nodes still setting
        #: their keys up (``_hold_for_setup``): node, what is kept, that setup's length.
        self.setup_holds: dict[str, list[tuple[str, Resources, float]]] = {}

    def _blocked(self, cls: _Class, borrower: bool) -> bool:
        """Whether a reservation keeps ``cls`` from the kinds it needs this round.

        A starving action's holds them from everyone. A guaranteed action's
        holds them from borrowers whose tenant has no guarantee of the kind:
        a tenant with one takes freed units within it ahead of any
        reservation, so holding back its borrowing beyond it kept little for
        the waiting action and cost the borrower much (fragment: build's
        mean ACT 0.1 s sooner, math's 0.14 s later; campus: t-rm's 31.3 s
        against 20.6 s, the waiting tenants' 1% sooner).
        """
        if self._reserved_for(self.reserved_all, (kind for kind, _ in cls.needs), cls):
            return True
        return borrower and self._reserved_for(self.reserved_from_borrowers, cls.unguaranteed, cls)

    def _reserved_for(
        self, reserved: dict[str, list[Offering]], kinds: Iterable[str], cls: _Class
    ) -> bool:
        """Whether ``reserved`` holds one of ``kinds`` on a node ``cls`` runs on."""
        overlaps = self.pool.overlaps
        for kind in kinds:
            places = reserved.get(kind)
            if places and any(overlaps(cls.offering, place) for place in places):
                return True
        return False

    def _place(self, cls: _Class, guaranteed: bool) -> bool:
        """Place the class's head entry; False when the rest of the class cannot go either.

        Warm nodes first, then any node. Best fit, or for an action that may
        grow while its unit kind is uncontended, the node with the most room.
        The caller has checked that the class's shape may still find room.

        A node still setting the class's keys up (a pull, a model load) is
        passed over: an action placed there holds its units idle until the
        setup ends, units others could use meanwhile (rmzoo: one job's calls
        held all sixteen GPUs through its model's load while two other jobs'
        calls waited). Where only such nodes have room, a guaranteed entry
        keeps that room for the round without taking it (its tenant's
        guarantee is not lent for the moment it needs it back) and a borrowing
        one takes nothing; both stay queued for the round the setup ends in,
        which batches what batches.
        """
        if (self.reserved_all or not guaranteed and self.reserved_from_borrowers) and self._blocked(
            cls, borrower=not guaranteed
        ):
            return False
        held = self.held_by_starving
        if held and any(held.get((cls.tenant, kind), cls) is not cls for kind, _ in cls.needs):
            return False
        entry = cls.entries[cls.position]
        holds = self.holds
        if holds:  # some kind is held from longer entries (``_hold_from_longer``)
            if cls.holds_seen != holds:
                self._see_holds(cls)
            if (
                entry[2] > (cls.held_over if guaranteed else cls.held_over_borrowing)
                and self.now - entry[4] < self._held_for_s(entry[2])  # else nothing holds it
            ):
                return False
        kept = self.kept
        if (
            kept
            and cls.tenant in kept
            and self.now - entry[4] < 2.0 * self.config.starvation_s  # else nothing keeps it
            and self._keeps(cls, entry[2], entry[3].job, kept[cls.tenant])
        ):
            return False
        if (
            self.guarded
            and self.now - entry[4] < 2.0 * self.config.starvation_s  # else nothing keeps it
            and self._guards(cls, entry[2])
        ):
            return False
        head = entry[3]
        members = entry[5]
        elasticity = head.elasticity
        roomiest = (
            cls.roomiest
            if self.elastic
            and len(members) <= 1
            and elasticity.max_units > elasticity.min_units
            and elasticity.unit_kind not in self.contended
            else BEST_FIT
        )
        pool = self.pool
        found = None
        index = cls.warm
        if index is None and cls.affinity and self.config.affinity:
            index = cls.warm = pool._index(cls.type, cls.affinity, cls.kind)
        avoiding = cls.affinity if self.config.affinity else frozenset()
        if avoiding and cls.shape in self.setup_only:  # as the round found it before
            return self._hold_for_setup(cls, guaranteed)
        if index is not None:
            found = pool.find(
                index,
                cls.need,
                cls.needs,
                cls.gpus_needed,
                roomiest,
                avoiding=avoiding,
                split_gpus=cls.split_gpus,
            )
        if found is None:
            warm_listed = bool(index)
            index = cls.anywhere
            if index is None:
                index = cls.anywhere = pool._index(cls.type, frozenset(), cls.kind)
            keeping: frozenset[str] = frozenset()
            if pool.evicting and head.setup_s > 0 and self.config.affinity:
                keeping = head.affinity
            found = pool.find(
                index,
                cls.need,
                cls.needs,
                cls.gpus_needed,
                roomiest,
                keeping,
                avoiding,
                split_gpus=cls.split_gpus,
            )
            if found is not None and keeping and not pool.leaves_slots(found[1], keeping):
                found = None  # another copy would take the slot a key nobody holds needs
            if found is None and keeping:  # room, if any, only where its setup evicts a key
                found = pool.find(
                    index,
                    cls.need,
                    cls.needs,
                    cls.gpus_needed,
                    roomiest,
                    avoiding=avoiding,
                    split_gpus=cls.split_gpus,
                )
                if found is not None and self._waits(
                    head, self.now - entry[4], warm_listed, found[1]
                ):
                    return False
            if found is None and avoiding and pool.setting_up_keys:
                there = pool.find(
                    index, cls.need, cls.needs, cls.gpus_needed, roomiest, split_gpus=cls.split_gpus
                )
                if there is not None:  # room only where its keys are still being set up
                    self.setup_only.add(cls.shape)
                    # Best fit found it already; the roomiest search found some node.
                    return self._hold_for_setup(cls, guaranteed, None if roomiest else there)
            if (
                found is None
                and cls.tenant in self.setup_holds
                and not (avoiding or cls.gpus_needed)
                and self._backfill(cls, entry[2])
            ):
                found = pool.find(
                    index, cls.need, cls.needs, cls.gpus_needed, roomiest, split_gpus=cls.split_gpus
                )
            if found is None:
                self.no_room.add(cls.shape)
                kind = cls.kind
                self.contended.setdefault(kind, []).append(cls)
                if self.now - entry[4] >= self.config.starvation_s:
                    _reserve(self.reserved_all, kind, cls.offering)
                elif guaranteed:
                    _reserve(self.reserved_from_borrowers, kind, cls.offering)
                self._hold_from_longer(cls, kind, room=True)
                return False
            warmed = False
            if keeping:
                pool.set_up_warm(found[1], keeping)
            if avoiding and head.setup_s > 0:
                pool.start_setting_up(found[1], avoiding)
        else:
            # Warm with the class's affinity, which is the action's (unless a batch group's).
            warmed = not cls.batched
        position, node_id, gpus = found
        pool.charge(cls.tenant, node_id, cls.plan, gpus, index, position)
        cls.position += 1
        units = elasticity.min_units if elasticity.min_units > 1 else 1
        out = self.out
        if len(members) > 1:  # a batch: one execution, each member its share
            share = {kind: amount / len(members) for kind, amount in cls.demand.items()}
            batch_id = f"batch:{head.id}"
            for member in members:
                out.append(_placement(member.id, node_id, share, units, batch_id, gpus))
            return True
        if self.elastic and units < elasticity.max_units:
            fixed_s = 0.0 if warmed else self._setup_s(head, node_id)
            alike = (elasticity, head.demand, entry[2], fixed_s)
            group = cls.gains
            if group is None or group.alike != alike:
                lends_gpus = cls.shrinks_gpus and self.config.shrinking
                group = cls.gains = _GainGroup(
                    cls.tenant, cls.demand, *alike, cls.split_gpus, lends_gpus
                )
                self.gain_groups.append(group)
                self.lends_gpus |= lends_gpus
            group.outs.append(len(out))
        out.append(_placement(head.id, node_id, dict(cls.demand), units, None, gpus))
        return True

    def _keeps(self, cls: _Class, work: float, job: str, kept: list[_Kept]) -> bool:
        """Whether an entry of ``cls`` (of ``job``) expected to run ``work`` leaves
        the room its tenant keeps for its shorter types.

        A type far shorter than the entry that held more lately than it asks
        now is between steps (or turns): placing long work at its minimum
        units, which nobody takes back, into the room it comes back to makes
        its next calls wait for that work's whole run (unseen-53-25: a
        tenant's 32 offline jobs of 177 s, placed while its interpreter task
        was between steps, took 64 of its 72 cores for the next step's 1 s
        calls). So the entry takes room only while the tenant, within its
        limit and the pool, keeps what ``TangramPolicy._kept`` worked out for
        such types: ``keep_share`` times what each held lately, less what it
        holds and asks now (twice, since a step's bursts ask more than its
        mean). The room is counted on the nodes that run the short type: idle
        cores elsewhere are none of its (unseen-76-14: 128 idle cores on GPU
        hosts hid a sandbox pool that a step of 74 s offline jobs filled, and
        its interpreter calls waited 0.97 s instead of 0.16 s). Where nothing
        holds the kind, nothing would end and bring a round back: no room is kept.

        Nor is room kept for the entry's own job's types while the entry's own
        type queues more than its nodes have free: a saturated job's short
        calls come back only as its long work ends, so holding that work back
        for them only makes both wait (unseen-78-18: a coding task's 60 s
        tests waited 40 s for edits that were waiting on them). Where the job
        has room to spare, keeping it still pays (ciloop's builds and calls).

        The other kinds of the short type's demand are kept in proportion to
        its cores: cores kept beside memory that long work took are no use to
        it (bursty with twice the trajectories: 32 data shards of 8 GiB,
        placed between the chat task's steps, took all 256 GiB of memory, and
        no chat call ran for 44 s with half the cores idle; mean ACT 20.2 s
        against partitioned's 17.5 s, 17.2 s kept so). Only from another
        job's long work, though: a job's own long work ends into its own
        short calls, and holding it back for them cost campus 1% to 5%
        (swe's tests for its edits, eval's benchmarks for its collects).
        """
        demand = cls.demand
        pool = self.pool
        saturated: bool | None = None  # worked out once, for a kept type of ``job``
        #: Per (kind, nodes that run the type, by the id of their shared tuple).
        needed: dict[tuple[str, int], tuple[tuple[str, ...], float]] = {}
        for room_kept in kept:
            kind = room_kept.kind
            if work <= room_kept.bound or demand.get(kind, 0.0) <= 0:
                continue
            nodes = pool.offering(room_kept.type)
            if not pool.overlaps(nodes, cls.offering):  # the entry cannot take it
                continue
            if job and room_kept.job == job:
                if kind not in RESIZABLE_KINDS:
                    continue
                if saturated is None:
                    own = self.type_loads.get((cls.tenant, cls.type))
                    saturated = (
                        own is not None
                        and own.kind == kind
                        and own.queued > pool.room_on(kind, cls.offering) + EPSILON
                    )
                if saturated:
                    continue
            _, amount = needed.get((kind, id(nodes)), (nodes, 0.0))
            needed[(kind, id(nodes))] = (nodes, amount + room_kept.amount)
        if not needed:
            return False
        usage = pool.usage.get(cls.tenant, _NO_USAGE)
        quota = pool.quotas.get(cls.tenant)
        for (kind, _), (nodes, amount) in needed.items():
            if pool.unused(kind) >= pool.total.get(kind, 0.0) - EPSILON:
                continue
            room = pool.room_on(kind, nodes)
            if quota is not None and kind in quota.limit:
                room = min(room, quota.limit[kind] - usage.get(kind, 0.0))
            if room - demand[kind] < amount - EPSILON:
                return True
        return False

    def _guards(self, cls: _Class, work: float) -> bool:
        """Whether an entry of ``cls`` expected to run ``work``, borrowing, leaves
        another tenant's idle guarantee of a kind nobody takes back to that
        tenant's short types.

        A GPU lent to a long job comes back only when the job ends, so a
        tenant between its steps finds its guarantee held for that whole run
        (unseen-117-17: another tenant's 195 s GPU jobs took the four GPUs a
        judge tenant is guaranteed while it was between steps, and its 2,048
        calls waited 80.4 s against partitioned's 64.1 s; 69.1 s so kept, the
        rest in the first step, before the calls were ever seen). So, as for a
        tenant's own short types (``_keeps``), an entry expected to run more
        than ``keep_ratio`` times as long as such a type leaves it
        ``keep_share`` times what it held lately, less what it holds and asks
        now, within what its tenant's guarantee has unused, on the nodes that
        run it. Only an entry beyond its own tenant's guarantee of the kind
        is held, and only where something holds the kind (else no round
        would come back to place it).
        """
        pool = self.pool
        demand = cls.demand
        usage = pool.usage.get(cls.tenant, _NO_USAGE)
        quota = pool.quotas.get(cls.tenant)
        needed: dict[tuple[str, int], tuple[tuple[str, ...], float]] = {}
        for tenant, row in self.guarded:
            kind = row.kind
            if tenant == cls.tenant or work <= row.bound or demand.get(kind, 0.0) <= 0:
                continue
            own = quota.guaranteed.get(kind, 0.0) if quota is not None else 0.0
            if usage.get(kind, 0.0) + demand[kind] <= own + EPSILON:
                continue  # within its own guarantee
            unused = pool.quotas[tenant].guaranteed.get(kind, 0.0) - pool.usage.get(
                tenant, _NO_USAGE
            ).get(kind, 0.0)
            amount = min(row.amount, unused)
            if amount <= EPSILON:
                continue
            nodes = pool.offering(row.type)
            if not pool.overlaps(nodes, cls.offering):  # the entry cannot take it
                continue
            _, total = needed.get((kind, id(nodes)), (nodes, 0.0))
            needed[(kind, id(nodes))] = (nodes, total + amount)
        for (kind, _), (nodes, amount) in needed.items():
            if pool.unused(kind) >= pool.total.get(kind, 0.0) - EPSILON:
                continue
            if pool.room_on(kind, nodes) - demand[kind] < amount - EPSILON:
                return True
        return False

    def _hold_for_setup(
        self,
        cls: _Class,
        guaranteed: bool,
        there: tuple[int, str, tuple[str, ...]] | None = None,
    ) -> bool:
        """The class's head waits for a setup under way; a guaranteed one keeps the
        room it would take there for the round (True; its tenant's work that ends
        sooner may run in it: ``_backfill``), a borrowing one takes none.
        ``there``: the best fit in ``cls.anywhere``, where the caller has it."""
        if not guaranteed or self.lending:
            return False
        pool = self.pool
        index = cls.anywhere
        if index is None:
            index = cls.anywhere = pool._index(cls.type, frozenset(), cls.kind)
        if there is None:
            there = pool.find(
                index, cls.need, cls.needs, cls.gpus_needed, BEST_FIT, split_gpus=cls.split_gpus
            )
        if there is None:
            return False
        position, node_id, gpus = there
        pool.charge(cls.tenant, node_id, cls.plan, gpus, index, position)
        setup_s = cls.entries[cls.position][3].setup_s
        self.setup_holds.setdefault(cls.tenant, []).append((node_id, cls.demand, setup_s))
        cls.position += 1
        return True

    def _backfill(self, cls: _Class, work_s: float) -> bool:
        """Give back what an entry of ``cls`` needs of the room its tenant keeps on a node
        still setting up (``_hold_for_setup``), where the entry would end, as
        expected, within that setup's length: room kept idle through a setup
        runs the tenant's other work meanwhile (unseen-61-12: an interpreter
        task's 45 s image pull kept every core of the tenant's 5 s agent runs).
        """
        holds = self.setup_holds[cls.tenant]
        pool = self.pool
        for at in range(len(holds) - 1, -1, -1):
            node_id, kept, setup_s = holds[at]
            if work_s > setup_s or cls.type not in pool.nodes[node_id].executors:
                continue
            free = pool.free.get(node_id, _NO_USAGE)
            if any(free.get(kind, 0.0) + kept.get(kind, 0.0) < need for kind, need in cls.needs):
                continue
            given = {kind: min(amount, cls.demand.get(kind, 0.0)) for kind, amount in kept.items()}
            left = {kind: amount - given[kind] for kind, amount in kept.items()}
            if any(amount > EPSILON for amount in left.values()):
                holds[at] = (node_id, left, setup_s)
            else:
                del holds[at]
            pool.charge(cls.tenant, node_id, pool.plan({k: -v for k, v in given.items()}))
            return True
        return False

    def _waits(self, head: PendingAction, waited_s: float, warm_listed: bool, node_id: str) -> bool:
        """Whether ``head``, with room only where setting its keys up evicts others
        (best fit: ``node_id``), waits for room on a node that holds them instead.

        A cold placement goes to a node with free warm slots where there is
        one: evicting a key in use sends the next action of that key cold
        too, and so on (thrashing). Where there is none, it waits while some
        node holds its keys (a full one: its room comes back as its actions
        end) or this round sets them up on one, until it starves
        (``starvation_s``); then it goes where there is room.

        Sooner, once it has waited as long as its setup takes, where the node
        holds enough keys that no action has started with for
        ``EVICT_WAIT_RATIO`` of that wait, and that no pending action has
        waited as long for: the node evicts its least recently used keys,
        used there no more recently, so its keys are short of holders and
        those are not. Waiting only the setup (ski rental) thrashed an
        overloaded terminal variant (mean ACT 0.85x static's); asking only
        that no action wait for the evicted keys still thrashed terminal on
        0.41 of its pool (their actions were between turns).

        At once where each key the node holds has two copies more than the
        head's: the copies even out (max-min, as ``Pool.leaves_slots`` shares
        free slots), so no two keys take a slot back and forth. Else one
        tenant's model, loaded on every host of an idle pool in its cold
        start, kept a later tenant's calls on the one host its model found
        (rmzoo on 2.5 times its pool: two models on ten hosts, the third's
        calls 0.57x partitioned's mean ACT).
        """
        if waited_s >= self.config.starvation_s:
            return False
        pool = self.pool
        if pool.spares_copies(node_id, head.affinity):
            return False
        if waited_s >= head.setup_s:
            now = self.now
            bound = EVICT_WAIT_RATIO * waited_s
            used_at = pool.warm_used_at
            wanted_since = pool.wanted_since
            others = pool.nodes[node_id].warm - head.affinity - pool.set_up.get(node_id, _NO_KEYS)
            idle = sum(
                now - used_at.get(key, now) >= bound and now - wanted_since.get(key, now) < bound
                for key in others
            )
            if idle >= pool.evicted_count(node_id, head.affinity):
                return False
        held = pool.warm_nodes
        set_up = pool.set_up.values()
        return warm_listed or all(
            held.get(key, 0) > 0 or any(key in keys for keys in set_up) for key in head.affinity
        )

    def _setup_s(self, action: PendingAction, node_id: str) -> float:
        """Setup ``action`` costs on ``node_id``: none where the node is warm with its affinity."""
        affinity = action.affinity
        cold = bool(affinity) and not affinity <= self.pool.nodes[node_id].warm
        return action.setup_s if cold else 0.0

    def place(self, classes: list[_Class]) -> None:
        """Guarantees first, then borrowers (fairly, or in key order for the ablation)."""
        borrowers = self.serve_guarantees(classes)
        if self.config.fair_share:
            self.borrow_fairly(borrowers)
        else:
            self.borrow_in_order(borrowers)

    def take_back(self, resizable: tuple[Resizable, ...], classes: list[_Class]) -> None:
        """Units running elastic actions hold above their minimum, for actions that wait.

        When some unplaced action could use them (it runs on a node that
        lends, or its tenant's limit of a lent kind stopped it), the extra
        units are lent to the pool (and their tenants' quotas) and those
        actions are placed again: room only grew, so what was skipped is tried
        anew. On each node where they placed something, as many whole units as
        it takes to end within capacity are taken back, from the actions holding
        the most extra units first, and as many more as keep a tenant that
        placed more within its limit (its placements elsewhere may have used
        its lent quota). The rest is charged again. GPUs (``Resizable.gpus``)
        are lent by id: each action keeps the lent ones nothing took.
        """
        pool = self.pool
        lent: dict[tuple[str, str], list[Resizable]] = {}
        for held in resizable:
            if held.units > held.min_units and held.node in pool.free and held.unit > 0:
                if held.gpus and not (
                    held.unit == 1 and len(held.gpus) == held.units and held.node in pool.gpu_free
                ):
                    continue  # GPUs come back by id, one a unit
                lent.setdefault((held.node, held.unit_kind), []).append(held)
        lent_kinds = {kind for _, kind in lent}
        lenders = {(h.tenant, h.unit_kind) for held_there in lent.values() for h in held_there}
        #: Types the nodes with units to lend run.
        lent_types = {t for node_id, _ in lent for t in pool.nodes[node_id].executors}
        # Unplaced classes the units could help: they run on a node that lends
        # room of a kind they ask, or their tenant's limit of a lent kind stopped them.
        helped = [
            cls
            for cls in classes
            if cls.position < len(cls.entries)
            and any(
                kind in lent_kinds
                and (
                    cls.type in lent_types
                    or ((cls.tenant, kind) in self.limited and (cls.tenant, kind) in lenders)
                )
                for kind, _ in cls.needs
            )
        ]
        if not helped:
            return
        #: Per (node, kind): the units lent, and the room after lending.
        extra: dict[tuple[str, str], float] = {}
        after: dict[tuple[str, str], float] = {}
        for (node_id, kind), held_there in lent.items():
            for held in held_there:
                pool.charge(held.tenant, node_id, pool.plan({kind: -held.extra}))
                if held.gpus:
                    ids = held.gpus[held.min_units :]
                    lent_ids = zip(held.gpu_groups[held.min_units :], ids, strict=True)
                    pool.release_gpus(node_id, lent_ids)
                extra[(node_id, kind)] = extra.get((node_id, kind), 0.0) + held.extra
            after[(node_id, kind)] = pool.free[node_id].get(kind, 0.0)
        lent_usage = {
            (tenant, kind): pool.usage.get(tenant, _NO_USAGE).get(kind, 0.0)
            for tenant, kind in lenders
        }
        # Room and quota of the lent kinds grew: what failed on them may go now.
        # Reservations of other kinds stand.
        self.no_room.clear()
        self.setup_only.clear()
        for kind in lent_kinds:
            self.contended.pop(kind, None)
            self.reserved_all.pop(kind, None)
            self.reserved_from_borrowers.pop(kind, None)
        self.lending = True  # units are taken back only for what is placed
        self.place(helped)
        self.lending = False
        #: Lenders whose tenant placed more of the kind in this pass.
        grew = {
            key
            for key, usage in lent_usage.items()
            if pool.usage.get(key[0], _NO_USAGE).get(key[1], 0.0) > usage + EPSILON
        }
        for (node_id, kind), held_there in lent.items():
            units = {held.action_id: held.units for held in held_there}
            #: Of GPUs, lent by id: the lent ones each action keeps, those nothing took.
            kept_gpus: dict[str, tuple[str, ...]] = {}
            if kind == "gpu":
                free_ids = {gpu for group in pool.gpu_free[node_id] for gpu in group}
                for held in held_there:
                    ids = tuple(gpu for gpu in held.gpus[held.min_units :] if gpu in free_ids)
                    kept_gpus[held.action_id] = ids
                    units[held.action_id] = held.min_units + len(ids)
            # Where this pass placed something, they keep only the room it left
            # (the node ends within its capacity); elsewhere all they held.
            left = pool.free[node_id].get(kind, 0.0)
            taken = 0.0
            if not kept_gpus and after[(node_id, kind)] - left > EPSILON:
                taken = extra[(node_id, kind)] - min(extra[(node_id, kind)], max(left, 0.0))
            while taken > EPSILON:
                # One unit from the action with the most extra units (then the first listed).
                held = max(held_there, key=lambda h: units[h.action_id] - h.min_units)
                if units[held.action_id] <= held.min_units:
                    break
                units[held.action_id] -= 1
                taken -= held.unit
            for held in held_there:
                # The tenant's placements elsewhere may have used its lent quota.
                quota = pool.quotas.get(held.tenant)
                if (held.tenant, kind) in grew and quota is not None and kind in quota.limit:
                    room = quota.limit[kind] - pool.usage[held.tenant].get(kind, 0.0)
                    fits = held.min_units + int(max(room, 0.0) / held.unit + EPSILON)
                    units[held.action_id] = min(units[held.action_id], fits)
                kept = units[held.action_id]
                kept_ids = kept_gpus.get(held.action_id, ())[: kept - held.min_units]
                if kept > held.min_units:
                    pool.charge(
                        held.tenant,
                        node_id,
                        pool.plan({kind: (kept - held.min_units) * held.unit}),
                        kept_ids,
                    )
                if kept < held.units:
                    allocation = dict(held.allocation)
                    allocation[kind] = kept * held.unit
                    gpus = held.gpus[: held.min_units] + kept_ids if held.gpus else ()
                    self.resizes.append(Resize(held.action_id, node_id, allocation, kept, gpus))

    def serve_guarantees(self, classes: list[_Class]) -> dict[str, list[_Class]]:
        """Place, in key order, every entry within its tenant's guarantee.

        Returns, per tenant, the classes whose rest must borrow.
        """
        usages = self.pool.usage
        no_room = self.no_room
        place = self._place
        heappop = heapq.heappop
        heapreplace = heapq.heapreplace
        borrowers: dict[str, list[_Class]] = {}
        heap = [(*cls.head_key(), position) for position, cls in enumerate(classes)]
        heapq.heapify(heap)
        while heap:
            position = heap[0][2]
            cls = classes[position]
            caps = cls.guarantee
            if caps is not None:
                usage = usages.get(cls.tenant, _NO_USAGE)
                for kind, amount, ceiling in caps:  # Pool.within, inline: once per placement
                    if usage.get(kind, 0.0) + amount > ceiling:
                        break
                else:
                    if (
                        cls.shape in no_room
                        or not place(cls, True)  # guaranteed
                        or cls.position >= len(cls.entries)
                    ):
                        heappop(heap)
                    else:
                        entry = cls.entries[cls.position]
                        heapreplace(heap, (entry[0], entry[1], position))
                    continue
            self._hold_for_limited(cls)
            self._hold_for_guaranteed(cls)
            borrowers.setdefault(cls.tenant, []).append(cls)
            heappop(heap)
        return borrowers

    def _hold_for_guaranteed(self, cls: _Class) -> None:
        """A head that its tenant's guarantee of its primary kind stops (its
        tenant's own actions fill it), a kind nobody takes back, and that finds
        no room of it keeps it for the rest of the guarantee pass from its
        tenant's entries, on its nodes, expected to run more than
        ``backfill_ratio`` times as long. Else each unit that frees goes to one
        of them, within the guarantee as it needs less, before the head
        borrows, and the head waits for their whole runs (unseen-33-16: 2-GPU
        judge calls behind 1-GPU offline jobs, one tenant guaranteed all 8
        GPUs). When it borrows, it holds the kind as any head with no room
        does (``_place``), from its turn on.
        """
        kind = cls.kind
        if kind in RESIZABLE_KINDS or self.config.backfill_ratio <= 0 or cls.guarantee is None:
            return
        pool = self.pool
        usage = pool.usage.get(cls.tenant, _NO_USAGE)
        if not any(
            k == kind and c > EPSILON and usage.get(k, 0.0) + a > c for k, a, c in cls.guarantee
        ):
            return
        index = cls.anywhere
        if index is None:
            index = cls.anywhere = pool._index(cls.type, frozenset(), kind)
        if (
            pool.find(
                index, cls.need, cls.needs, cls.gpus_needed, BEST_FIT, split_gpus=cls.split_gpus
            )
            is not None
        ):
            return
        bound = cls.entries[cls.position][2] * self.config.backfill_ratio
        self._hold(self.held_in_guarantee, (cls.tenant, kind), cls.offering, bound)

    def _hold_from_longer(self, cls: _Class, kind: str, *, room: bool) -> None:
        """The class's head, stopped on ``kind``, keeps it from its tenant's entries
        (and, where it found no ``room``, from borrowing ones, and then only on the
        nodes it runs on) expected to run more than ``backfill_ratio`` times as
        long, if nobody can take ``kind`` back.

        Such a unit is held to the end of whatever runs on it: a long action
        that took it would make the short head wait for its whole run, where
        leaving it costs the long one the short one's wait for the rest
        (unseen-17-3: 2-GPU judge calls at their tenant's 8-GPU limit, each
        freed GPU taken by a 300 s offline job). Shorter entries still take
        it, and a held entry that has waited ``_held_for_s`` is held by
        nothing, so waits stay bounded. The rest of the class runs about as
        long as its head, so it waits too.
        """
        ratio = self.config.backfill_ratio
        if ratio <= 0 or kind in RESIZABLE_KINDS:
            return
        bound = cls.entries[cls.position][2] * ratio
        place = cls.offering if room else None
        held = self.held_from_longer
        keys: tuple[tuple[str | None, str], ...] = (
            ((None, kind), (cls.tenant, kind)) if room else ((cls.tenant, kind),)
        )
        for key in keys:
            self._hold(held, key, place, bound)

    def _held_for_s(self, work: float) -> float:
        """How long holds for shorter work may keep an entry expected to run
        ``work`` waiting: twice ``starvation_s`` or, if longer, ``work /
        aging_rate``, the horizon within which the order itself lets actions
        submitted after it go first (``_classes``' key): a hold keeps it no
        longer than the order alone might.

        Twice ``starvation_s`` alone let a tenant's 227 s GPU jobs, once they
        had waited 600 s, take each GPU that freed from its 2 s judge calls,
        which need two at once: the calls waited until they starved
        themselves (unseen-120-15, seed 1: 309 s and 351 s in the third and
        fourth steps, against 76 s and 86 s under ``partitioned``).
        """
        starving_s = 2.0 * self.config.starvation_s
        aging = self.config.aging_rate
        return max(starving_s, work / aging) if aging > 0 else starving_s

    def _hold(
        self,
        holds: dict[tuple[str | None, str], dict[Offering | None, float]],
        key: tuple[str | None, str],
        place: Offering | None,
        bound: float,
    ) -> None:
        """Lower ``key``'s bound at ``place`` in ``holds`` to ``bound``, counting the change."""
        places = holds.setdefault(key, {})
        if bound < places.get(place, math.inf):
            places[place] = bound
            self.holds += 1

    def _see_holds(self, cls: _Class) -> None:
        """The class's bounds on expected work under the round's holds: as a
        guaranteed entry (its tenant's, and those for the guarantee pass) and as
        a borrowing one (its tenant's and borrowers')."""
        own = borrowing = guaranteed = math.inf
        held, in_guarantee, where = self.held_from_longer, self.held_in_guarantee, cls.offering
        for kind, _ in cls.needs:
            own = min(own, self._held_bound(held, (cls.tenant, kind), where))
            borrowing = min(borrowing, self._held_bound(held, (None, kind), where))
            guaranteed = min(guaranteed, self._held_bound(in_guarantee, (cls.tenant, kind), where))
        cls.held_over = min(own, guaranteed)
        cls.held_over_borrowing = min(own, borrowing)
        cls.holds_seen = self.holds

    def _held_bound(
        self,
        holds: dict[tuple[str | None, str], dict[Offering | None, float]],
        key: tuple[str | None, str],
        where: Offering,
    ) -> float:
        """The lowest bound ``key``'s ``holds`` put on entries that run on ``where``."""
        places = holds.get(key)
        if not places:
            return math.inf
        overlaps = self.pool.overlaps
        return min(
            (bound for place, bound in places.items() if place is None or overlaps(where, place)),
            default=math.inf,
        )

    def _hold_for_limited(self, cls: _Class) -> None:
        """A head its tenant's limit stops keeps the kinds over the limit from its
        tenant's entries expected to run much longer (``_hold_from_longer``) and,
        once it has starved, from all its tenant's other entries: else the
        tenant's smaller actions take each unit that frees, and it never fits."""
        starving = self.now - cls.entries[cls.position][4] >= self.config.starvation_s
        usage = self.pool.usage.get(cls.tenant, _NO_USAGE)
        for kind, amount, ceiling in cls.limit:
            if usage.get(kind, 0.0) + amount > ceiling:
                self._hold_from_longer(cls, kind, room=False)
                if starving:
                    self.held_by_starving.setdefault((cls.tenant, kind), cls)

    def borrow_fairly(self, borrowers: dict[str, list[_Class]]) -> None:
        """Lowest dominant share / weight first; a tenant keeps its turn while still lowest."""
        queues = {
            tenant: [(*cls.head_key(), i) for i, cls in enumerate(classes)]
            for tenant, classes in borrowers.items()
        }
        for queue in queues.values():
            heapq.heapify(queue)
        turns: list[tuple[float, str]] = [(self._share(t), t) for t in sorted(borrowers)]
        heapq.heapify(turns)
        while turns:
            _, tenant = heapq.heappop(turns)
            queue = queues[tenant]
            next_share = turns[0][0] if turns else math.inf
            share = self._borrow(
                queue, borrowers[tenant], (tenant, self._weight(tenant), next_share)
            )
            if share is not None and queue:
                heapq.heappush(turns, (share, tenant))

    def borrow_in_order(self, borrowers: dict[str, list[_Class]]) -> None:
        """Borrowers in key order regardless of tenant (the fair-share ablation)."""
        classes = [cls for tenant in sorted(borrowers) for cls in borrowers[tenant]]
        heap = [(*cls.head_key(), i) for i, cls in enumerate(classes)]
        heapq.heapify(heap)
        self._borrow(heap, classes, None)

    def _borrow(
        self,
        heap: list[tuple[float, str, int]],
        classes: list[_Class],
        turn: tuple[str, float, float] | None,
    ) -> float | None:
        """Place borrowing entries in key order (``heap`` over ``classes``) while they may.

        With ``turn`` (tenant, weight, the next tenant's share) it stops once the
        tenant's share / weight passes the next one's and returns that share;
        otherwise it runs until the heap is empty and returns None. A class
        leaves the heap when its head entry is over its limit, would take a
        non-lent idle guarantee or a reserved kind, or finds no room.
        """
        pool = self.pool
        usages = pool.usage
        lends_all = pool.lends_all
        no_room = self.no_room
        heappop = heapq.heappop
        heapreplace = heapq.heapreplace
        tenant, weight, next_share = turn if turn is not None else ("", 1.0, math.inf)
        while heap:
            position = heap[0][2]
            cls = classes[position]
            if cls.shape in no_room:
                heappop(heap)
                continue
            usage = usages.get(cls.tenant, _NO_USAGE)
            for kind, amount, ceiling in cls.limit:  # Pool.within, inline: once per attempt
                if usage.get(kind, 0.0) + amount > ceiling:
                    self.limited.add((cls.tenant, kind))
                    self._hold_for_limited(cls)
                    break
            else:
                if (lends_all or pool.leaves_unlent_guarantees(cls.tenant, cls.demand)) and (
                    self._place(cls, False)  # not guaranteed: positional, a faster call
                ):
                    entries = cls.entries
                    if cls.position >= len(entries):
                        heappop(heap)
                    else:
                        entry = entries[cls.position]
                        heapreplace(heap, (entry[0], entry[1], position))
                    if turn is not None:
                        share = pool.dominant_share(tenant) / weight
                        if share > next_share:
                            return share
                    continue
            heappop(heap)
        return None

    def _weight(self, tenant: str) -> float:
        quota = self.pool.quotas.get(tenant)
        return quota.weight if quota and quota.weight > 0 else 1.0

    def _share(self, tenant: str) -> float:
        return self.pool.dominant_share(tenant) / self._weight(tenant)

    def expand(self, growable: list[tuple[Resizable, float]]) -> None:
        """Give leftover room to elastic actions, largest expected saving first.

        Candidates are the round's placements and ``growable``: running
        actions with the work they have left, which grow by ``Decision.resizes``.
        """
        pool = self.pool
        pool.retire_indexes()  # no more best-fit searches: stop keeping node indexes sorted
        config = self.config
        budget: dict[str, float] = {}
        threshold: dict[str, float] = {}
        #: Per kind, whether its extra units are lent (taken back as soon as others wait).
        lent: dict[str, bool] = {}
        #: GPUs, where some placement's extra ones are lent (it may give them back):
        #: the headroom the others leave (``budget`` does not hold it back then).
        kept_free: dict[str, float] = {}
        #: Per (node, kind contended), whether an action short of it fits there
        #: in its other kinds (``_wanted_on``): lent units grow only where none does.
        wanted: dict[tuple[str, str], bool] = {}
        for kind, total in pool.total.items():
            if total <= 0 or kind in self.reserved_all:
                continue
            lent[kind] = self._lent(kind)
            some_lent = lent[kind] or (self.lends_gpus and kind == "gpu")
            if kind in self.contended and not some_lent:
                continue
            headroom = 0.0 if lent[kind] else config.headroom * total
            if some_lent and headroom:
                kept_free[kind] = headroom
                headroom = 0.0
            budget[kind] = pool.unused(kind) - headroom
            threshold[kind] = self._threshold(kind)
        memo: dict[tuple[int, float, int, float], tuple[float, float]] = {}
        #: Candidates: (-seconds saved, placement in ``out``, unit, gain group,
        #: where in the group's placements the next one is, or 0 for none);
        #: placements are in round order, so ties go as placed. A group's first
        #: units all gain alike, so it is one candidate at a time, in order.
        heap: list[tuple[float, int, float, _GainGroup, int]] = []
        #: Per unit kind, the smallest unit a candidate asks: once the budget is
        #: below it, no candidate of that kind can take one.
        smallest: dict[str, float] = {}
        for group in self.gain_groups:  # all still at their minimum units
            elasticity = group.elasticity
            units = max(elasticity.min_units, 1)
            gain = self._gain(elasticity, group.work_s, units, group.fixed_s, threshold, memo)
            kind = elasticity.unit_kind
            unit = group.demand.get(kind, 0.0) / units
            if gain is not None and unit > 0:
                heap.append((-gain, group.outs[0], unit, group, 1))
                if unit < smallest.get(kind, math.inf):
                    smallest[kind] = unit
        #: Running actions that may grow, as candidates at -1 - their index here.
        #: Their units are lent: taken back when others wait, so no load rule holds
        #: one back (a unit of theirs never stands between an arrival and a core).
        anything = {kind: 0.0 for kind in threshold}
        running: list[Resizable] = []
        for action, left_s in growable:
            kind = action.unit_kind
            if kind not in threshold:
                continue
            elasticity = action.elasticity
            allocation = action.allocation
            group = _GainGroup(action.tenant, allocation, elasticity, allocation, left_s, 0.0)
            gain = self._gain(elasticity, left_s, action.units, 0.0, anything, memo)
            unit = action.unit
            if gain is not None and unit > 0:
                heap.append((-gain, -1 - len(running), unit, group, 0))
                running.append(action)
                if unit < smallest.get(kind, math.inf):
                    smallest[kind] = unit
        live = {kind for kind, unit in smallest.items() if budget.get(kind, 0.0) >= unit}
        heapq.heapify(heap)
        out = self.out
        #: Per (unit kind, unit), the plan of one unit for ``Pool.charge``.
        plans: dict[tuple[str, float], Plan] = {}
        #: Per (tenant, unit kind, unit), what the tenant's limit bounds of one unit.
        caps: dict[tuple[str, str, float], Caps] = {}
        grown: dict[int, _Grown] = {}
        while heap and live:
            saved, at, unit, group, following = heap[0]
            outs = group.outs
            if following and following < len(outs):
                heapq.heapreplace(heap, (saved, outs[following], unit, group, following + 1))
            else:
                heapq.heappop(heap)
            elasticity = group.elasticity
            kind = elasticity.unit_kind
            if budget[kind] < unit:
                continue
            lends = lent[kind] or group.shrinks_gpus
            if not lends and kept_free and budget[kind] - kept_free.get(kind, 0.0) < unit:
                continue
            node_id = out[at].node_id if at >= 0 else running[-1 - at].node
            if pool.free[node_id].get(kind, 0.0) + 1e-9 < unit:
                continue
            if kind in self.contended:  # and lent, or some placement's is: it has a budget
                if not lends:
                    continue
                known = wanted.get((node_id, kind))
                if known is None:
                    known = wanted[(node_id, kind)] = self._wanted_on(node_id, kind)
                if known:
                    continue
            tenant = group.tenant
            one = {kind: unit}
            limit = caps.get((tenant, kind, unit))
            if limit is None:
                limit = caps[(tenant, kind, unit)] = pool.limit_caps(tenant, one)
            if not pool.within(tenant, limit):
                continue
            if not (pool.lends_all or pool.leaves_unlent_guarantees(tenant, one)):
                continue
            if not lends and not pool.leaves_idle_guarantees(tenant, one):
                continue
            state = grown.get(at)
            if state is not None:
                held = state.gpus
            elif at >= 0:
                held = out[at].gpus
            else:  # a running action: of a kind taken back, so never GPUs
                held = ()
            more: tuple[str, ...] = ()
            if kind == "gpu" and node_id in pool.gpu_free:
                if held and self.config.topology and not group.split_gpus:
                    free_gpus = pool.free_in_group_of(node_id, held[0])
                else:
                    free_gpus = [g for grp in pool.gpu_free[node_id] for g in grp]
                if not free_gpus or unit != 1:
                    continue
                more = (free_gpus[0],)
            plan = plans.get((kind, unit))
            if plan is None:
                plan = plans[(kind, unit)] = pool.plan(one)
            pool.charge(tenant, node_id, plan, more)
            budget[kind] -= unit
            if budget[kind] < smallest[kind]:
                live.discard(kind)
            threshold[kind] = self._threshold(kind)
            if state is None:
                units = running[-1 - at].units if at < 0 else max(elasticity.min_units, 1)
                state = grown[at] = _Grown(group, units, held)
            state.units += 1
            state.gpus += more
            state.extra[kind] = state.extra.get(kind, 0.0) + unit
            rule = threshold if at >= 0 else anything
            gain = self._gain(elasticity, group.work_s, state.units, group.fixed_s, rule, memo)
            if gain is not None:
                heapq.heappush(heap, (-gain, at, unit, group, 0))
        for at, state in grown.items():  # their placements, with the extra units
            if at < 0:
                was = running[-1 - at]
                kind = was.unit_kind
                allocation = dict(was.allocation)
                allocation[kind] = allocation.get(kind, 0.0) + state.extra[kind]
                self.resizes.append(Resize(was.action_id, was.node, allocation, state.units))
                continue
            allocation = dict(state.group.allocation)
            for kind, amount in state.extra.items():
                allocation[kind] = allocation.get(kind, 0.0) + amount
            placement = out[at]
            out[at] = _placement(
                placement.action_id, placement.node_id, allocation, state.units, None, state.gpus
            )

    def _wanted_on(self, node_id: str, kind: str) -> bool:
        """Whether an action that found no room of ``kind`` runs on the node and
        fits there in every other kind it needs: only then would extra units
        of ``kind`` there stand between it and a start.

        Elsewhere, what it lacks is some other kind (memory, say): cores lent
        to running actions there take nothing from it, and they are taken
        back once that kind frees (bursty on a quarter of its pool: eight
        shards filled the node's memory, and the chat calls waiting for memory
        kept the other eight cores from them for minutes).
        """
        free = self.pool.free[node_id]
        executors = self.pool.nodes[node_id].executors
        return any(
            cls.type in executors
            and all(amount <= free.get(k, 0.0) + EPSILON for k, amount in cls.needs if k != kind)
            for cls in self.contended.get(kind, ())
        )

    def _lent(self, kind: str) -> bool:
        """Whether extra units of ``kind`` are lent: taken back as soon as others wait."""
        return self.config.shrinking and kind in RESIZABLE_KINDS

    def _threshold(self, kind: str) -> float:
        """The fraction of its time an extra unit must save at the kind's current load.

        Zero on an idle pool, ``min_gain`` at half load, growing without bound
        as the pool fills: room is cheap when idle and dear when others may
        soon need it.
        """
        total = self.pool.total.get(kind, 0.0)
        load = 1.0 - self.pool.unused(kind) / total if total > 0 else 1.0
        load = min(max(load, 0.0), 0.99)
        return self.config.min_gain * load / (1.0 - load)

    @staticmethod
    def _gain(
        elasticity: Elasticity,
        work_s: float,
        units: int,
        fixed_s: float,
        threshold: dict[str, float],
        memo: dict[tuple[int, float, int, float], tuple[float, float]],
    ) -> float | None:
        """Seconds one more unit saves, if worth it at the kind's load.

        ``memo`` keeps (seconds saved, whole run) per (elasticity, work, units, setup).
        """
        if units >= elasticity.max_units or elasticity.unit_kind not in threshold:
            return None
        key = (id(elasticity), work_s, units, fixed_s)
        known = memo.get(key)
        if known is None:
            now_s = duration_at(elasticity, work_s, units)
            next_s = duration_at(elasticity, work_s, units + 1)
            known = memo[key] = (now_s - next_s, fixed_s + now_s)
        saved, whole_s = known
        if saved <= 0 or whole_s <= 0 or saved / whole_s < threshold[elasticity.unit_kind]:
            return None
        return saved

    def placements(self) -> list[Placement]:
        return self.out
