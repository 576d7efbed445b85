"""An in-memory ledger of node capacity and tenant usage for one scheduling round.

Policies place actions against the ledger so that every placement in a
decision sees the ones before it: no node goes over capacity and no tenant
over its limit, whatever order the policy chooses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from tangram_policy.pool import take_gpus
from tangram_policy.types import EPSILON, Node, Resources, Snapshot, TenantQuota


def fits(demand: Resources, free: Mapping[str, float]) -> bool:
    return all(amount <= free.get(kind, 0.0) + EPSILON for kind, amount in demand.items() if amount)


class Ledger:
    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes: dict[str, Node] = {node.id: node for node in snapshot.nodes}
        self.free: dict[str, dict[str, float]] = {
            node.id: dict(node.capacity) for node in snapshot.nodes
        }
        #: Free GPU ids per node that names its GPUs, in group order.
        self.gpu_free: dict[str, list[str]] = {
            node.id: [gpu for group in node.gpu_groups for gpu in group]
            for node in snapshot.nodes
            if node.gpu_groups
        }
        self.usage: dict[str, dict[str, float]] = defaultdict(dict)
        self.quotas: Mapping[str, TenantQuota] = snapshot.quotas
        #: The pool's capacity: the nodes' unless the snapshot lists only some of them.
        self.capacity: dict[str, float] = dict(snapshot.capacity or {})
        if snapshot.capacity is None:
            for node in snapshot.nodes:
                for kind, amount in node.capacity.items():
                    self.capacity[kind] = self.capacity.get(kind, 0.0) + amount
        for running in snapshot.running:
            self.take(running.tenant, running.node, running.allocation, running.gpus)

    def take(
        self, tenant: str, node_id: str, allocation: Resources, gpus: tuple[str, ...] = ()
    ) -> None:
        """Charge ``allocation``; its GPUs are ``gpus``, or the first free ids when unknown."""
        free = self.free.get(node_id)
        if free is not None:
            for kind, amount in allocation.items():
                free[kind] = free.get(kind, 0.0) - amount
        ids = self.gpu_free.get(node_id)
        count = int(round(allocation.get("gpu", 0.0)))
        if ids is not None and count > 0:
            take_gpus([ids], gpus, count)
        usage = self.usage[tenant]
        for kind, amount in allocation.items():
            usage[kind] = usage.get(kind, 0.0) + amount

    def first_gpus(self, node_id: str, demand: Resources) -> tuple[str, ...]:
        """The first free GPU ids ``demand`` asks for on ``node_id`` (none where unnamed)."""
        count = int(round(demand.get("gpu", 0.0)))
        ids = self.gpu_free.get(node_id)
        if ids is None or count <= 0:
            return ()
        return tuple(ids[:count])

    def within_guarantee(self, tenant: str, demand: Resources) -> bool:
        quota = self.quotas.get(tenant)
        if quota is None:
            return not any(amount > 0 for amount in demand.values())
        bounds = quota.guarantee_bounds(demand)
        if bounds is None:
            return False
        usage = self.usage[tenant]
        return all(
            usage.get(kind, 0.0) + amount <= guaranteed + EPSILON
            for kind, amount, guaranteed in bounds
        )

    def within_limit(self, tenant: str, demand: Resources) -> bool:
        quota = self.quotas.get(tenant)
        if quota is None:
            return True
        usage = self.usage[tenant]
        return all(
            usage.get(kind, 0.0) + amount <= quota.limit[kind] + EPSILON
            for kind, amount in demand.items()
            if amount and kind in quota.limit
        )

    def unlent_guarantee(self, exclude: str) -> dict[str, float]:
        """Idle guarantee others do not lend (past their lending limit): borrowers leave it free."""
        reserved: dict[str, float] = {}
        for tenant, quota in self.quotas.items():
            if tenant == exclude:
                continue
            for kind, unlent in quota.unlent_idle(self.usage.get(tenant, {})).items():
                reserved[kind] = reserved.get(kind, 0.0) + unlent
        return reserved

    def leaves_unlent_guarantees(self, tenant: str, demand: Resources) -> bool:
        """Whether ``tenant`` taking ``demand`` leaves the pool room for the idle guarantee
        others do not lend, in the kinds it asks for."""
        reserved = self.unlent_guarantee(exclude=tenant)
        return all(
            amount + reserved[kind]
            <= self.capacity.get(kind, 0.0)
            - sum(usage.get(kind, 0.0) for usage in self.usage.values())
            + EPSILON
            for kind, amount in demand.items()
            if amount > 0 and kind in reserved
        )

    def best_fit(
        self, demand: Resources, action_type: str, candidates: Iterable[str]
    ) -> str | None:
        """The node that leaves the least normalised slack after taking ``demand``."""
        best: tuple[float, str] | None = None
        for node_id in candidates:
            node = self.nodes[node_id]
            if action_type not in node.executors:
                continue
            free = self.free[node_id]
            if not fits(demand, free):
                continue
            slack = sum(
                (free.get(kind, 0.0) - demand.get(kind, 0.0)) / cap
                for kind, cap in node.capacity.items()
                if cap > 0
            )
            if best is None or (slack, node_id) < best:
                best = (slack, node_id)
        return best[1] if best else None
