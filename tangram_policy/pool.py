"""The capacity pool one scheduling round places against, indexed for speed.

Like ``Ledger`` it tracks free room per node and usage per tenant, so every
placement sees the ones before it. It adds what a 10,000-action, 1,000-node
round needs to stay far from a pending x nodes scan: per (executor type,
affinity, primary kind) a list of nodes sorted by free room of that kind, kept
sorted as placements take room (best fit is a bisection), running pool totals,
and free GPU ids per interconnect group for topology-aware placement.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping

from tangram_policy.types import EPSILON, Node, Resources, Snapshot, TenantQuota

#: Nodes examined past the best-fit point before a placement gives up.
SCAN_LIMIT = 256

IndexKey = tuple[str, frozenset[str], str]


def primary_kind(demand: Resources) -> str:
    """The kind a placement is best-fitted on: GPUs first, then cores, then any."""
    if demand.get("gpu", 0.0) > 0:
        return "gpu"
    if demand.get("cpu", 0.0) > 0:
        return "cpu"
    for kind, amount in sorted(demand.items()):
        if amount > 0:
            return kind
    return "cpu"


def _fits(demand: Resources, free: Mapping[str, float]) -> bool:
    for kind, amount in demand.items():
        if amount > 0 and amount > free.get(kind, 0.0) + EPSILON:
            return False
    return True


class Pool:
    def __init__(self, snapshot: Snapshot, *, topology: bool = True) -> None:
        self.topology = topology
        self.nodes: dict[str, Node] = {node.id: node for node in snapshot.nodes}
        self.free: dict[str, dict[str, float]] = {}
        self.total_free: dict[str, float] = {}
        self.gpu_free: dict[str, list[list[str]]] = {}
        for node in snapshot.nodes:
            self.free[node.id] = dict(node.capacity)
            for kind, amount in node.capacity.items():
                self.total_free[kind] = self.total_free.get(kind, 0.0) + amount
            if node.gpu_groups:
                self.gpu_free[node.id] = [sorted(group) for group in node.gpu_groups]
        self.quotas: Mapping[str, TenantQuota] = snapshot.quotas
        self.usage: dict[str, dict[str, float]] = {}
        for running in snapshot.running:
            self.take(running.tenant, running.node, running.allocation, running.gpus)
        if snapshot.capacity is not None:
            self.total: dict[str, float] = dict(snapshot.capacity)
        else:
            self.total = {}
            for node in snapshot.nodes:
                for kind, amount in node.capacity.items():
                    self.total[kind] = self.total.get(kind, 0.0) + amount
        self._by_type: dict[str, list[str]] | None = None
        self._indexes: dict[IndexKey, list[tuple[float, str]]] = {}
        self._node_indexes: dict[str, list[IndexKey]] = {}

    # -- accounting -------------------------------------------------------

    def take(
        self, tenant: str, node_id: str, allocation: Resources, gpus: tuple[str, ...] = ()
    ) -> None:
        free = self.free.get(node_id)
        if free is not None:
            keys = self._node_indexes.get(node_id, ())
            old = [(key, free.get(key[2], 0.0)) for key in keys]
            for kind, amount in allocation.items():
                free[kind] = free.get(kind, 0.0) - amount
                self.total_free[kind] = self.total_free.get(kind, 0.0) - amount
            for key, before in old:
                after = free.get(key[2], 0.0)
                if after != before:
                    index = self._indexes[key]
                    del index[bisect_left(index, (before, node_id))]
                    insort(index, (after, node_id))
            groups = self.gpu_free.get(node_id)
            if groups is not None and allocation.get("gpu", 0.0) > 0:
                self._take_gpus(groups, gpus, int(round(allocation["gpu"])))
        usage = self.usage.setdefault(tenant, {})
        for kind, amount in allocation.items():
            usage[kind] = usage.get(kind, 0.0) + amount

    @staticmethod
    def _take_gpus(groups: list[list[str]], gpus: tuple[str, ...], count: int) -> None:
        if gpus:
            held = set(gpus)
            for group in groups:
                group[:] = [g for g in group if g not in held]
            return
        for group in groups:  # ids unknown: assume they fill groups in order
            while count and group:
                group.pop(0)
                count -= 1

    def within_guarantee(self, tenant: str, demand: Resources) -> bool:
        quota = self.quotas.get(tenant)
        guaranteed = quota.guaranteed if quota else {}
        usage = self.usage.get(tenant, {})
        return all(
            usage.get(kind, 0.0) + amount <= guaranteed.get(kind, 0.0) + EPSILON
            for kind, amount in demand.items()
            if amount > 0
        )

    def within_limit(self, tenant: str, demand: Resources) -> bool:
        quota = self.quotas.get(tenant)
        if quota is None:
            return True
        usage = self.usage.get(tenant, {})
        return all(
            usage.get(kind, 0.0) + amount <= quota.limit[kind] + EPSILON
            for kind, amount in demand.items()
            if amount > 0 and kind in quota.limit
        )

    def leaves_unlent_guarantees(self, tenant: str, demand: Resources) -> bool:
        """Whether a borrower taking ``demand`` leaves others' non-lent idle guarantee free."""
        reserved: dict[str, float] = {}
        for other, quota in self.quotas.items():
            if other == tenant or quota.lend_guarantee:
                continue
            usage = self.usage.get(other, {})
            for kind, amount in quota.guaranteed.items():
                idle = amount - usage.get(kind, 0.0)
                if idle > 0:
                    reserved[kind] = reserved.get(kind, 0.0) + idle
        return all(
            amount + reserved.get(kind, 0.0) <= self.total_free.get(kind, 0.0) + EPSILON
            for kind, amount in demand.items()
            if amount > 0 and kind in reserved
        )

    def dominant_share(self, tenant: str) -> float:
        usage = self.usage.get(tenant, {})
        share = 0.0
        for kind, amount in usage.items():
            total = self.total.get(kind, 0.0)
            if total > 0:
                share = max(share, amount / total)
        return share

    # -- placement --------------------------------------------------------

    def _index(
        self, action_type: str, affinity: frozenset[str], kind: str
    ) -> list[tuple[float, str]]:
        key = (action_type, affinity, kind)
        index = self._indexes.get(key)
        if index is None:
            if self._by_type is None:
                self._by_type = {}
                for node in self.nodes.values():
                    for executor in node.executors:
                        self._by_type.setdefault(executor, []).append(node.id)
            index = []
            for node_id in self._by_type.get(action_type, ()):
                if affinity and not affinity <= self.nodes[node_id].warm:
                    continue
                index.append((self.free[node_id].get(kind, 0.0), node_id))
                self._node_indexes.setdefault(node_id, []).append(key)
            index.sort()
            self._indexes[key] = index
        return index

    def best_fit(
        self, demand: Resources, action_type: str, affinity: frozenset[str] = frozenset()
    ) -> tuple[str, tuple[str, ...]] | None:
        """The node with the least room of the primary kind that still fits ``demand``.

        Small requests fill the fullest nodes first, so large ones keep finding
        whole nodes; with ``affinity`` only nodes warm with all its keys count.
        Returns the node and, on a node with GPU groups, the GPU ids to use.
        """
        kind = primary_kind(demand)
        index = self._index(action_type, affinity, kind)
        need = demand.get(kind, 0.0)
        gpus_needed = int(round(demand.get("gpu", 0.0)))
        start = bisect_left(index, (need - EPSILON, ""))
        for position in range(start, min(start + SCAN_LIMIT, len(index))):
            node_id = index[position][1]
            if not _fits(demand, self.free[node_id]):
                continue
            if gpus_needed and node_id in self.gpu_free:
                gpus = self.pick_gpus(node_id, gpus_needed)
                if gpus is None:
                    continue
                return node_id, gpus
            return node_id, ()
        return None

    def pick_gpus(self, node_id: str, count: int) -> tuple[str, ...] | None:
        """``count`` free GPU ids, inside one group when topology counts (best-fit group)."""
        groups = self.gpu_free[node_id]
        if not self.topology or count == 1:
            candidates = [g for group in groups for g in group]
            if count == 1:
                best = min(
                    (group for group in groups if group), key=len, default=None
                )  # a GPU from the fullest group keeps whole groups free
                return (best[0],) if best else None
            return tuple(candidates[:count]) if len(candidates) >= count else None
        fitting = [group for group in groups if len(group) >= count]
        if not fitting:
            return None
        return tuple(min(fitting, key=len)[:count])

    def free_in_group_of(self, node_id: str, gpu: str) -> list[str]:
        """Free GPU ids in the interconnect group that holds ``gpu``."""
        groups = self.gpu_free.get(node_id)
        if groups is None:
            return []
        for position, group in enumerate(self.nodes[node_id].gpu_groups):
            if gpu in group:
                return groups[position]
        return []
