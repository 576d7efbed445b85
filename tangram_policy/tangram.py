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
   interconnect group. Then the room left over goes, by largest expected
   seconds saved (Amdahl), to extra units of placed elastic actions, but only
   for kinds nobody is waiting on, keeping a headroom, and only while each
   unit cuts enough of the action's time for the current load (EARL's rule).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from tangram_policy.estimate import duration_at, expected_duration, type_priors
from tangram_policy.pool import Pool, primary_kind
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
    min_gain: float = 0.08


class _Item:
    """An action, or a batch of actions, as the round places it."""

    __slots__ = ("members", "tenant", "type", "demand", "key", "work_s", "affinity", "waited")

    def __init__(
        self,
        members: list[PendingAction],
        demand: Resources,
        key: float,
        work_s: float,
        waited: float,
    ) -> None:
        head = members[0]
        self.members = members
        self.tenant = head.tenant
        self.type = head.type
        self.demand = demand
        self.key = key
        self.work_s = work_s
        self.affinity = head.affinity
        self.waited = waited


@dataclass(slots=True)
class _Placed:
    item: _Item
    node_id: str
    gpus: list[str]
    units: int
    extra: dict[str, float] = field(default_factory=dict)


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
        items = self._items(snapshot, pool)
        round_ = _Round(pool, config)
        borrowers: dict[str, list[_Item]] = {}
        for item in items:
            if pool.within_guarantee(item.tenant, item.demand):
                round_.place(item, guaranteed=True)
            else:
                borrowers.setdefault(item.tenant, []).append(item)
        if config.fair_share:
            round_.borrow_fairly(borrowers)
        else:
            for item in sorted(
                (i for queue in borrowers.values() for i in queue), key=lambda i: i.key
            ):
                round_.borrow(item)
        if config.elastic:
            round_.expand()
        return Decision(placements=tuple(round_.placements()))

    def _items(self, snapshot: Snapshot, pool: Pool) -> list[_Item]:
        config = self.config
        stats = snapshot.duration_stats
        priors = type_priors(stats)
        now = snapshot.now
        singles: list[_Item] = []
        batchable: dict[tuple[str, str, str], list[tuple[float, float, PendingAction]]] = {}
        for action in snapshot.pending:
            work = expected_duration(action, stats, priors)
            if config.ordering:
                key = work * 2.0 ** (-action.priority) + config.aging_rate * action.submitted_at
            else:
                key = action.submitted_at - 1e9 * action.priority
            if config.batching and action.batch_key is not None and action.batch_limit > 1:
                group = (action.batch_key, action.tenant, action.type)
                batchable.setdefault(group, []).append((key, work, action))
            else:
                singles.append(_Item([action], action.demand, key, work, now - action.submitted_at))
        for members in batchable.values():
            members.sort(key=lambda m: (m[0], m[2].id))
            size = self._batch_size(pool, members[0][2], len(members))
            for start in range(0, len(members), size):
                chunk = members[start : start + size]
                demand: dict[str, float] = {}
                for _, _, action in chunk:
                    for kind, amount in action.demand.items():
                        demand[kind] = max(demand.get(kind, 0.0), amount)
                singles.append(
                    _Item(
                        [action for _, _, action in chunk],
                        demand,
                        chunk[0][0],
                        max(work for _, work, _ in chunk),
                        now - min(action.submitted_at for _, _, action in chunk),
                    )
                )
        singles.sort(key=lambda i: (i.key, i.members[0].id))
        return singles

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
    def __init__(self, pool: Pool, config: TangramConfig) -> None:
        self.pool = pool
        self.config = config
        self.placed: list[_Placed] = []
        #: Shapes that found no room: room only shrinks within a round.
        self.no_room: set[tuple[str, frozenset[str], tuple[tuple[str, float], ...]]] = set()
        #: Kinds some action waits for: later actions (all / borrowers) leave them.
        self.reserved_all: set[str] = set()
        self.reserved_from_borrowers: set[str] = set()
        #: Kinds some action found no room of: extra elastic units leave them.
        self.contended: set[str] = set()

    def _blocked(self, item: _Item, borrower: bool) -> bool:
        for kind, amount in item.demand.items():
            if amount > 0 and (
                kind in self.reserved_all or (borrower and kind in self.reserved_from_borrowers)
            ):
                return True
        return False

    def place(self, item: _Item, *, guaranteed: bool) -> bool:
        if self._blocked(item, borrower=not guaranteed):
            return False
        if self._try(item):
            return True
        kind = primary_kind(item.demand)
        self.contended.add(kind)
        if item.waited >= self.config.starvation_s:
            self.reserved_all.add(kind)
        elif guaranteed:
            self.reserved_from_borrowers.add(kind)
        return False

    def borrow(self, item: _Item) -> bool:
        pool = self.pool
        if not pool.within_limit(item.tenant, item.demand):
            return False
        if not pool.leaves_unlent_guarantees(item.tenant, item.demand):
            return False
        return self.place(item, guaranteed=False)

    def borrow_fairly(self, borrowers: dict[str, list[_Item]]) -> None:
        heap: list[tuple[float, str]] = []
        cursor: dict[str, int] = {}
        for tenant in sorted(borrowers):
            cursor[tenant] = 0
            heap.append((self._share(tenant), tenant))
        heapq.heapify(heap)
        while heap:
            _, tenant = heapq.heappop(heap)
            queue = borrowers[tenant]
            position = cursor[tenant]
            if position >= len(queue):
                continue
            cursor[tenant] = position + 1
            self.borrow(queue[position])
            if position + 1 < len(queue):
                heapq.heappush(heap, (self._share(tenant), tenant))

    def _share(self, tenant: str) -> float:
        quota = self.pool.quotas.get(tenant)
        weight = quota.weight if quota and quota.weight > 0 else 1.0
        return self.pool.dominant_share(tenant) / weight

    def _try(self, item: _Item) -> bool:
        shape = (item.type, item.affinity, tuple(sorted(item.demand.items())))
        if shape in self.no_room:
            return False
        pool = self.pool
        found = None
        if self.config.affinity and item.affinity:
            found = pool.best_fit(item.demand, item.type, item.affinity)
        if found is None:
            found = pool.best_fit(item.demand, item.type)
        if found is None:
            self.no_room.add(shape)
            return False
        node_id, gpus = found
        pool.take(item.tenant, node_id, item.demand, gpus)
        units = max(item.members[0].elasticity.min_units, 1)
        self.placed.append(_Placed(item, node_id, list(gpus), units))
        return True

    def expand(self) -> None:
        """Give leftover room to elastic actions, largest expected saving first."""
        pool = self.pool
        config = self.config
        budget: dict[str, float] = {}
        threshold: dict[str, float] = {}
        for kind, total in pool.total.items():
            if total <= 0 or kind in self.contended or kind in self.reserved_all:
                continue
            free = pool.total_free.get(kind, 0.0)
            budget[kind] = free - config.headroom * total
            load = 1.0 - free / total
            threshold[kind] = config.min_gain * (1.0 + 4.0 * max(load, 0.0))
        heap: list[tuple[float, int]] = []
        for position, placed in enumerate(self.placed):
            gain = self._gain(placed, threshold)
            if gain is not None:
                heap.append((-gain, position))
        heapq.heapify(heap)
        while heap:
            _, position = heapq.heappop(heap)
            placed = self.placed[position]
            action = placed.item.members[0]
            elasticity = action.elasticity
            kind = elasticity.unit_kind
            unit = action.demand.get(kind, 0.0) / max(elasticity.min_units, 1)
            if unit <= 0 or budget.get(kind, 0.0) < unit:
                continue
            extra = {kind: unit}
            if pool.free[placed.node_id].get(kind, 0.0) + 1e-9 < unit:
                continue
            if not pool.within_limit(action.tenant, extra):
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
            placed.units += 1
            placed.gpus.extend(gpus)
            placed.extra[kind] = placed.extra.get(kind, 0.0) + unit
            gain = self._gain(placed, threshold)
            if gain is not None:
                heapq.heappush(heap, (-gain, position))

    @staticmethod
    def _gain(placed: _Placed, threshold: dict[str, float]) -> float | None:
        """Seconds one more unit saves, if worth it at the kind's load."""
        if len(placed.item.members) != 1:
            return None
        elasticity: Elasticity = placed.item.members[0].elasticity
        if placed.units >= elasticity.max_units or elasticity.unit_kind not in threshold:
            return None
        now_s = duration_at(elasticity, placed.item.work_s, placed.units)
        next_s = duration_at(elasticity, placed.item.work_s, placed.units + 1)
        saved = now_s - next_s
        if now_s <= 0 or saved / now_s < threshold[elasticity.unit_kind]:
            return None
        return saved

    def placements(self) -> list[Placement]:
        out: list[Placement] = []
        for placed in self.placed:
            members = placed.item.members
            if len(members) == 1:
                allocation = dict(placed.item.demand)
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
            share = {kind: amount / len(members) for kind, amount in placed.item.demand.items()}
            batch_id = f"batch:{members[0].id}"
            for member in members:
                out.append(
                    Placement(
                        member.id, placed.node_id, share, placed.units, batch_id, tuple(placed.gpus)
                    )
                )
        return out
