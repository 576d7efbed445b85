"""The scheduler's read: one consistent snapshot of the pool for the policy."""

from __future__ import annotations

from django.utils import timezone

from apps.actions.models import PLACED_STATES, Action, ActionDurationStat, ActionState
from apps.inventory.models import Node
from apps.tenants.models import Quota
from tangram_policy.types import (
    DurationStat,
    Elasticity,
    PendingAction,
    RunningAction,
    Snapshot,
    TenantQuota,
)
from tangram_policy.types import Node as PolicyNode

#: The policy sees at most this many queued actions per round, highest priority and oldest first.
MAX_PENDING_PER_ROUND = 10_000
NOT_ELASTIC = Elasticity()


def _quotas() -> dict[str, TenantQuota]:
    by_tenant: dict[str, dict[str, Quota]] = {}
    for quota in Quota.objects.all():
        by_tenant.setdefault(str(quota.tenant_id), {})[quota.resource] = quota
    out = {}
    # The policy takes one weight and one lending flag per tenant: the mean of its
    # rows' weights, and lending only if every row lends.
    for tenant, quotas in by_tenant.items():
        weights = [q.weight for q in quotas.values()]
        out[tenant] = TenantQuota(
            tenant=tenant,
            guaranteed={k: q.guaranteed for k, q in quotas.items()},
            limit={k: q.limit for k, q in quotas.items()},
            weight=sum(weights) / len(weights),
            lend_guarantee=all(q.lend_guarantee for q in quotas.values()),
        )
    return out


def _duration_stats() -> dict[tuple[str, str], DurationStat]:
    return {
        (str(tenant_id), action_type): DurationStat(count=count, mean_s=mean_s)
        for tenant_id, action_type, count, mean_s in ActionDurationStat.objects.values_list(
            "tenant_id", "type", "count", "mean_s"
        )
    }


def scheduling_snapshot() -> Snapshot:
    now = timezone.now()
    nodes = tuple(
        PolicyNode(
            id=str(n.id),
            capacity={k: float(v) for k, v in n.capacity.items()},
            executors=frozenset(n.executors),
            warm=frozenset(n.warm),
        )
        for n in Node.objects.filter(state=Node.State.ONLINE).order_by("name")
    )
    pending = tuple(
        PendingAction(
            id=str(a["id"]),
            tenant=str(a["tenant_id"]),
            type=a["type"],
            demand=a["demand"],
            submitted_at=a["submitted_at"].timestamp(),
            priority=a["priority"],
            job=a["job"],
            trajectory=a["trajectory"],
            duration_hint_s=a["duration_hint_s"],
            elasticity=Elasticity(**a["elasticity"]) if a["elasticity"] else NOT_ELASTIC,
            affinity=frozenset(a["affinity"]),
        )
        for a in Action.objects.filter(state=ActionState.QUEUED)
        .order_by("-priority", "submitted_at")
        .values(
            "id",
            "tenant_id",
            "type",
            "demand",
            "submitted_at",
            "priority",
            "job",
            "trajectory",
            "duration_hint_s",
            "elasticity",
            "affinity",
        )[:MAX_PENDING_PER_ROUND]
    )
    running = tuple(
        RunningAction(
            id=str(a["id"]),
            tenant=str(a["tenant_id"]),
            type=a["type"],
            node=str(a["node_id"]),
            allocation=a["allocation"],
            started_at=(a["started_at"] or a["assigned_at"]).timestamp(),
        )
        for a in Action.objects.filter(state__in=PLACED_STATES).values(
            "id", "tenant_id", "type", "node_id", "allocation", "started_at", "assigned_at"
        )
    )
    return Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        quotas=_quotas(),
        pending=pending,
        running=running,
        duration_stats=_duration_stats(),
    )
