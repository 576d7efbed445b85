"""The elastic, ACT-minimising Tangram policy.

One round, from a snapshot, in four passes:

1. **Batches.** Pending reward-scoring actions with the same ``batch_key``
   (and tenant and type) are coalesced, in order, into batches of up to
   ``batch_limit`` only when there are more of them than free slots for them:
   a batch then finishes its members sooner than a queue would. A batch is
   placed as one member's demand, shared evenly by its members.
2. **Order.** Shortest expected work first: the expected duration (hint, else
   learned per tenant and type, else a prior) scaled by ``2 ** -priority``,
   plus ``aging_rate`` x submit time. The key is fixed per action, so an
   action can only be overtaken by actions submitted before
   ``submitted_at + work / aging_rate``: waits are bounded.
3. **Quotas.** Actions within their tenant's guarantee are placed first, in
   order. The rest borrow idle capacity up to their limits, the tenant with the
   lowest dominant-resource share / weight first (Kueue-style fair sharing),
   never taking a non-lent idle guarantee. A guaranteed or starving action
   that finds no room reserves its primary kind: nothing after it in the
   round takes that kind, so the capacity comes back to it as actions finish.
4. **Placement and elasticity.** Best fit on the primary kind, warm nodes
   (image pulled, model resident) first, multi-GPU actions inside one
   interconnect group; while nobody waits for its unit kind, an elastic action
   goes instead to the fitting node with the most room, since its extra units
   must come from its own node. Then the room left over goes, by largest expected
   seconds saved (Amdahl), to extra units of placed elastic actions, but only
   for kinds nobody is waiting on, keeping a headroom, and only while each
   unit cuts enough of the action's time for the current load (EARL's rule:
   ``min_gain x load / (1 - load)``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from tangram_policy.estimate import duration_at, expected_duration, type_priors
from tangram_policy.pool import Index, Pool, primary_kind
from tangram_policy.types import (
    Decision,
    Elasticity,
    PendingAction,
    Placement,
    Resources,
    Snapshot,
)


@dataclass(frozen=True, slots=True)
class TangramConfig:
    """Each switch turns one mechanism off for an ablation."""

    ordering: bool = True
    fair_share: bool = True
    affinity: bool = True
    topology: bool = True
    elastic: bool = True
    batching: bool = True
    #: Seconds of ordering key an action gains per second it waits.
    aging_rate: float = 0.5
    #: An action that has waited this long reserves its kind when it does not fit.
    starvation_s: float = 300.0
    #: Fraction of each kind's pool that extra elastic units leave free for arrivals.
    headroom: float = 0.1
    #: Smallest fraction of its time an extra unit must save, on an idle pool.
    min_gain: float = 0.05


Shape = tuple[str, frozenset[str], tuple[tuple[str, float], ...]]
#: One schedulable unit: (key, first action id, expected work s, members, earliest submit).
Entry = tuple[float, str, float, tuple[PendingAction, ...], float]


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
        "guarantee",
        "limit",
        "warm",
        "anywhere",
    )

    def __init__(self, head: PendingAction, demand: Resources, shape: int, pool: Pool) -> None:
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
        self.guarantee = pool.guarantee_caps(head.tenant, demand)
        self.limit = pool.limit_caps(head.tenant, demand)
        #: The node indexes placements try (nodes warm with its affinity, any node), once needed.
        self.warm: Index | None = None
        self.anywhere: Index | None = None

    def head_key(self) -> tuple[float, str]:
        entry = self.entries[self.position]
        return entry[0], entry[1]


class _Placed:
    __slots__ = ("cls", "members", "work_s", "node_id", "gpus", "units", "fixed_s", "extra")

    def __init__(
        self, cls: _Class, entry: Entry, node_id: str, gpus: list[str], units: int, fixed_s: float
    ) -> None:
        self.cls = cls
        self.members = entry[3]
        self.work_s = entry[2]
        self.node_id = node_id
        self.gpus = gpus
        self.units = units
        #: Seconds before the run that more units do not shorten (setup on a cold node).
        self.fixed_s = fixed_s
        self.extra: dict[str, float] = {}


class TangramPolicy:
    name = "tangram"

    def __init__(self, config: TangramConfig | None = None, name: str | None = None) -> None:
        self.config = config or TangramConfig()
        if name is not None:
            self.name = name

    def decide(self, snapshot: Snapshot) -> Decision:
        if not snapshot.pending or not snapshot.nodes:
            return Decision()
        config = self.config
        pool = Pool(snapshot, topology=config.topology)
        round_ = _Round(pool, config, snapshot.now)
        borrowers = round_.serve_guarantees(self._classes(snapshot, pool))
        if config.fair_share:
            round_.borrow_fairly(borrowers)
        else:
            round_.borrow_in_order(borrowers)
        if config.elastic:
            round_.expand()
        return Decision(placements=tuple(round_.placements()))

    def _classes(self, snapshot: Snapshot, pool: Pool) -> list[_Class]:
        config = self.config
        stats = snapshot.duration_stats
        priors = type_priors(stats)
        classes: dict[tuple[object, ...], _Class] = {}
        shapes: dict[Shape, int] = {}
        signatures: dict[int, tuple[tuple[str, float], ...]] = {}
        estimates: dict[tuple[str, str], float] = {}
        batchable: dict[tuple[str, str, str], list[Entry]] = {}
        #: Where an action's entry goes, by what decides it (demand by identity).
        targets: dict[tuple[object, ...], list[Entry]] = {}
        aging = config.aging_rate
        ordering = config.ordering
        batching = config.batching
        for action in snapshot.pending:
            tenant = action.tenant
            if action.duration_hint_s is None:
                pair = (tenant, action.type)
                work = estimates.get(pair, -1.0)
                if work < 0:
                    work = estimates[pair] = expected_duration(action, stats, priors)
            else:
                work = expected_duration(action, stats, priors)
            if ordering:
                priority = action.priority
                scaled = work if priority == 0 else work * 2.0 ** (-priority)
                key = scaled + aging * action.submitted_at
            else:
                key = action.submitted_at - 1e9 * action.priority
            demand = action.demand
            spec = (
                id(demand),
                tenant,
                action.type,
                action.affinity,
                action.batch_key,
                action.batch_limit,
            )
            target = targets.get(spec)
            if target is None:
                if batching and action.batch_key is not None and action.batch_limit > 1:
                    target = batchable.setdefault((action.batch_key, tenant, action.type), [])
                else:
                    signature = signatures.get(id(demand))
                    if signature is None:
                        signature = signatures[id(demand)] = tuple(sorted(demand.items()))
                    class_key = (tenant, action.type, action.affinity, signature)
                    cls = classes.get(class_key)
                    if cls is None:
                        shape = shapes.setdefault(
                            (action.type, action.affinity, signature), len(shapes)
                        )
                        cls = classes[class_key] = _Class(action, demand, shape, pool)
                    target = cls.entries
                targets[spec] = target
            target.append((key, action.id, work, (action,), action.submitted_at))
        out = list(classes.values())
        for cls in out:
            cls.entries.sort()
        for entries in batchable.values():
            entries.sort()
            head = entries[0][3][0]
            size = self._batch_size(pool, head, len(entries))
            largest: dict[str, float] = {}
            for entry in entries:
                for kind, amount in entry[3][0].demand.items():
                    largest[kind] = max(largest.get(kind, 0.0), amount)
            shape = shapes.setdefault(
                (head.type, head.affinity, tuple(sorted(largest.items()))), len(shapes)
            )
            cls = _Class(head, largest, shape, pool)
            for start in range(0, len(entries), size):
                chunk = entries[start : start + size]
                cls.entries.append(
                    (
                        chunk[0][0],
                        chunk[0][1],
                        max(e[2] for e in chunk),
                        tuple(e[3][0] for e in chunk),
                        min(e[4] for e in chunk),
                    )
                )
            out.append(cls)
        return out

    @staticmethod
    def _batch_size(pool: Pool, action: PendingAction, count: int) -> int:
        """Batch only as much as needed for every member to start now."""
        limit = action.batch_limit
        if count <= 1 or limit <= 1:
            return 1
        kind = primary_kind(action.demand)
        need = action.demand.get(kind, 0.0)
        if need <= 0:
            return 1
        slots = 0
        for _, node_id in pool._index(action.type, frozenset(), kind):
            slots += int(pool.free[node_id].get(kind, 0.0) / need + 1e-9)
            if slots >= count:
                return 1
        return min(limit, math.ceil(count / max(slots, 1)))


class _Round:
    def __init__(self, pool: Pool, config: TangramConfig, now: float) -> None:
        self.pool = pool
        self.config = config
        self.now = now
        self.placed: list[_Placed] = []
        #: Shapes that found no room: room only shrinks within a round.
        self.no_room: set[int] = set()
        #: Kinds some action waits for: later actions (all / borrowers) leave them.
        self.reserved_all: set[str] = set()
        self.reserved_from_borrowers: set[str] = set()
        #: Kinds some action found no room of: extra elastic units leave them.
        self.contended: set[str] = set()

    def _blocked(self, cls: _Class, borrower: bool) -> bool:
        reserved_all = self.reserved_all
        reserved = self.reserved_from_borrowers if borrower else ()
        if not reserved_all and not reserved:
            return False
        return any(kind in reserved_all or kind in reserved for kind, _ in cls.needs)

    def _place(self, cls: _Class, *, guaranteed: bool) -> bool:
        """Place the class's head entry; False when the rest of the class cannot go either."""
        if cls.shape in self.no_room or self._blocked(cls, borrower=not guaranteed):
            return False
        entry = cls.entries[cls.position]
        if self._try(cls, entry):
            cls.position += 1
            return True
        kind = cls.kind
        self.contended.add(kind)
        if self.now - entry[4] >= self.config.starvation_s:
            self.reserved_all.add(kind)
        elif guaranteed:
            self.reserved_from_borrowers.add(kind)
        return False

    def serve_guarantees(self, classes: list[_Class]) -> dict[str, list[_Class]]:
        """Place, in key order, every entry within its tenant's guarantee.

        Returns, per tenant, the classes whose rest must borrow.
        """
        within = self.pool.within
        borrowers: dict[str, list[_Class]] = {}
        heap = [(*cls.head_key(), position) for position, cls in enumerate(classes)]
        heapq.heapify(heap)
        while heap:
            position = heap[0][2]
            cls = classes[position]
            if not within(cls.tenant, cls.guarantee):
                borrowers.setdefault(cls.tenant, []).append(cls)
                heapq.heappop(heap)
                continue
            if not self._place(cls, guaranteed=True) or cls.position >= len(cls.entries):
                heapq.heappop(heap)
                continue
            entry = cls.entries[cls.position]
            heapq.heapreplace(heap, (entry[0], entry[1], position))
        return borrowers

    def _borrow_next(self, heap: list[tuple[float, str, int]], classes: list[_Class]) -> bool:
        """Try the tenant's next entry by key; whether one was placed."""
        position = heap[0][2]
        cls = classes[position]
        pool = self.pool
        if (
            cls.shape in self.no_room
            or not pool.within(cls.tenant, cls.limit)
            or not pool.leaves_unlent_guarantees(cls.tenant, cls.demand)
            or not self._place(cls, guaranteed=False)
        ):
            heapq.heappop(heap)
            return False
        if cls.position >= len(cls.entries):
            heapq.heappop(heap)
        else:
            entry = cls.entries[cls.position]
            heapq.heapreplace(heap, (entry[0], entry[1], position))
        return True

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
            classes = borrowers[tenant]
            next_share = turns[0][0] if turns else float("inf")
            while queue:
                if self._borrow_next(queue, classes):
                    share = self._share(tenant)
                    if share > next_share:
                        if queue:
                            heapq.heappush(turns, (share, tenant))
                        break

    def borrow_in_order(self, borrowers: dict[str, list[_Class]]) -> None:
        """Borrowers in key order regardless of tenant (the fair-share ablation)."""
        classes = [cls for tenant in sorted(borrowers) for cls in borrowers[tenant]]
        heap = [(*cls.head_key(), i) for i, cls in enumerate(classes)]
        heapq.heapify(heap)
        while heap:
            self._borrow_next(heap, classes)

    def _share(self, tenant: str) -> float:
        quota = self.pool.quotas.get(tenant)
        weight = quota.weight if quota and quota.weight > 0 else 1.0
        return self.pool.dominant_share(tenant) / weight

    def _try(self, cls: _Class, entry: Entry) -> bool:
        pool = self.pool
        found = None
        if self.config.affinity and cls.affinity:
            warm = cls.warm
            if warm is None:
                warm = cls.warm = pool._index(cls.type, cls.affinity, cls.kind)
            found = self._fit(cls, entry, warm)
        if found is None:
            anywhere = cls.anywhere
            if anywhere is None:
                anywhere = cls.anywhere = pool._index(cls.type, frozenset(), cls.kind)
            found = self._fit(cls, entry, anywhere)
        if found is None:
            self.no_room.add(cls.shape)
            return False
        node_id, gpus = found
        pool.take(cls.tenant, node_id, cls.demand, gpus)
        head = entry[3][0]
        units = max(head.elasticity.min_units, 1)
        cold = bool(head.affinity) and not head.affinity <= pool.nodes[node_id].warm
        fixed_s = head.setup_s if cold else 0.0
        self.placed.append(_Placed(cls, entry, node_id, list(gpus), units, fixed_s))
        return True

    def _fit(self, cls: _Class, entry: Entry, index: Index) -> tuple[str, tuple[str, ...]] | None:
        """Best fit, or for an action that may grow, the node with the most room."""
        members = entry[3]
        elasticity = members[0].elasticity
        if (
            self.config.elastic
            and len(members) == 1
            and elasticity.max_units > elasticity.min_units
            and elasticity.unit_kind not in self.contended
        ):
            return self.pool.roomiest(index, cls.needs, cls.gpus_needed)
        return self.pool.fit(index, cls.need, cls.needs, cls.gpus_needed)

    def expand(self) -> None:
        """Give leftover room to elastic actions, largest expected saving first."""
        pool = self.pool
        config = self.config
        budget: dict[str, float] = {}
        threshold: dict[str, float] = {}
        for kind, total in pool.total.items():
            if total <= 0 or kind in self.contended or kind in self.reserved_all:
                continue
            budget[kind] = pool.unused(kind) - config.headroom * total
            threshold[kind] = self._threshold(kind)
        heap: list[tuple[float, int]] = []
        for position, placed in enumerate(self.placed):
            gain = self._gain(placed, threshold)
            if gain is not None:
                heap.append((-gain, position))
        heapq.heapify(heap)
        while heap:
            _, position = heapq.heappop(heap)
            placed = self.placed[position]
            action = placed.members[0]
            elasticity = action.elasticity
            kind = elasticity.unit_kind
            unit = action.demand.get(kind, 0.0) / max(elasticity.min_units, 1)
            if unit <= 0 or budget.get(kind, 0.0) < unit:
                continue
            extra = {kind: unit}
            if pool.free[placed.node_id].get(kind, 0.0) + 1e-9 < unit:
                continue
            if not pool.within_limit(action.tenant, extra) or not (
                pool.leaves_unlent_guarantees(action.tenant, extra)
            ):
                continue
            gpus: tuple[str, ...] = ()
            if kind == "gpu" and placed.node_id in pool.gpu_free:
                if placed.gpus and self.config.topology:
                    group = pool.free_in_group_of(placed.node_id, placed.gpus[0])
                else:
                    group = [g for grp in pool.gpu_free[placed.node_id] for g in grp]
                if not group or unit != 1:
                    continue
                gpus = (group[0],)
            pool.take(action.tenant, placed.node_id, extra, gpus)
            budget[kind] -= unit
            threshold[kind] = self._threshold(kind)
            placed.units += 1
            placed.gpus.extend(gpus)
            placed.extra[kind] = placed.extra.get(kind, 0.0) + unit
            gain = self._gain(placed, threshold)
            if gain is not None:
                heapq.heappush(heap, (-gain, position))

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
    def _gain(placed: _Placed, threshold: dict[str, float]) -> float | None:
        """Seconds one more unit saves, if worth it at the kind's load."""
        if len(placed.members) != 1:
            return None
        elasticity: Elasticity = placed.members[0].elasticity
        if placed.units >= elasticity.max_units or elasticity.unit_kind not in threshold:
            return None
        now_s = duration_at(elasticity, placed.work_s, placed.units)
        next_s = duration_at(elasticity, placed.work_s, placed.units + 1)
        saved = now_s - next_s
        whole_s = placed.fixed_s + now_s
        if whole_s <= 0 or saved / whole_s < threshold[elasticity.unit_kind]:
            return None
        return saved

    def placements(self) -> list[Placement]:
        out: list[Placement] = []
        for placed in self.placed:
            members = placed.members
            demand = placed.cls.demand
            if len(members) == 1:
                allocation = dict(demand)
                if placed.extra:
                    for kind, amount in placed.extra.items():
                        allocation[kind] = allocation.get(kind, 0.0) + amount
                out.append(
                    Placement(
                        members[0].id,
                        placed.node_id,
                        allocation,
                        placed.units,
                        None,
                        tuple(placed.gpus),
                    )
                )
                continue
            share = {kind: amount / len(members) for kind, amount in demand.items()}
            batch_id = f"batch:{members[0].id}"
            for member in members:
                out.append(
                    Placement(
                        member.id, placed.node_id, share, placed.units, batch_id, tuple(placed.gpus)
                    )
                )
        return out
