"""Reads for actions, always through ``access_actions`` so a tenant sees only its own."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import Http404

from apps.actions.models import PLACED_STATES, Action, ActionState
from apps.core.exceptions import ApplicationError
from apps.tenants.models import Tenant
from apps.tenants.selectors import Principal
from tangram_policy.estimate import work_at_min_units
from tangram_policy.types import Elasticity
from tangram_sim.sim import ActionRecord

#: Finished states whose run a trace replays; a cancelled action's run was cut short.
TRACED_STATES = (ActionState.SUCCEEDED, ActionState.FAILED, ActionState.TIMED_OUT)


def add_resources(into: dict[str, float], amounts: dict[str, Any]) -> None:
    """Add one allocation (or demand) into running totals per resource kind."""
    for kind, amount in amounts.items():
        into[kind] = into.get(kind, 0.0) + float(amount)


@dataclasses.dataclass
class PlacedUsage:
    """What assigned and running actions hold, and how many they are, per node and tenant id."""

    by_node: dict[Any, dict[str, float]] = dataclasses.field(default_factory=dict)
    by_tenant: dict[Any, dict[str, float]] = dataclasses.field(default_factory=dict)
    actions_by_node: dict[Any, int] = dataclasses.field(default_factory=dict)
    actions_by_tenant: dict[Any, int] = dataclasses.field(default_factory=dict)

    def free_on(self, node_id: Any, capacity: dict[str, Any]) -> dict[str, float]:
        """A node's ``capacity`` less what placed actions hold on it, per kind."""
        held = self.by_node.get(node_id, {})
        return {kind: float(amount) - held.get(kind, 0.0) for kind, amount in capacity.items()}


def placed_usage(*, tenant_id: Any = None, node_ids: Sequence[Any] | None = None) -> PlacedUsage:
    """What assigned and running actions hold (of one tenant, on some nodes, or all).

    Grouped in SQL by (tenant, node, allocation), and each distinct allocation
    decoded once: thousands of running actions come back as a few rows.
    """
    placed = Action.objects.filter(state__in=PLACED_STATES)
    if tenant_id is not None:
        placed = placed.filter(tenant_id=tenant_id)
    if node_ids is not None:
        placed = placed.filter(node_id__in=node_ids)
    usage = PlacedUsage()
    decoded: dict[str, dict[str, Any]] = {}
    held = (
        placed.annotate(allocation_text=Cast("allocation", output_field=TextField()))
        .values_list("tenant_id", "node_id", "allocation_text")
        .annotate(count=Count("id"))
        .order_by()
    )
    for tenant_id_, node_id, text, count in held:
        allocation = decoded.get(text)
        if allocation is None:
            allocation = decoded[text] = json.loads(text) if text else {}
        amounts = {kind: float(amount) * count for kind, amount in allocation.items()}
        add_resources(usage.by_tenant.setdefault(tenant_id_, {}), amounts)
        usage.actions_by_tenant[tenant_id_] = usage.actions_by_tenant.get(tenant_id_, 0) + count
        if node_id is not None:
            add_resources(usage.by_node.setdefault(node_id, {}), amounts)
            usage.actions_by_node[node_id] = usage.actions_by_node.get(node_id, 0) + count
    return usage


def placed_gpus(*, node_ids: Sequence[Any]) -> dict[Any, set[str]]:
    """The GPU ids that assigned and running actions hold, per node id.

    Members of a batch hold the same ids: each distinct list is read once.
    """
    held: dict[Any, set[str]] = {}
    rows = (
        Action.objects.filter(state__in=PLACED_STATES, node_id__in=node_ids)
        .exclude(gpus=[])
        .values_list("node_id", "gpus")
        .order_by()
        .distinct()
    )
    for node_id, gpus in rows:
        held.setdefault(node_id, set()).update(gpus)
    return held


def access_actions(*, principal: Principal) -> QuerySet[Action]:
    actions = Action.objects.select_related("node")
    if principal.is_staff:
        return actions
    return actions.filter(tenant_id__in=principal.tenant_ids)


def access_action(*, principal: Principal, action_id: Any) -> Action:
    """The action if the principal may see it; 404 otherwise, whether it exists or not."""
    try:
        return access_actions(principal=principal).get(pk=action_id)
    except (Action.DoesNotExist, ValidationError):
        raise Http404("No such action.") from None


def action_list(*, principal: Principal, filters: dict[str, str]) -> QuerySet[Action]:
    actions = access_actions(principal=principal)
    for field in ("job", "trajectory", "state", "type"):
        if filters.get(field):
            actions = actions.filter(**{field: filters[field]})
    return actions.order_by("-submitted_at", "id")


def action_state(*, action_id: str) -> str | None:
    """Unscoped: callers check access first (the long-poll re-reads it often)."""
    return Action.objects.filter(pk=action_id).values_list("state", flat=True).first()


def action_trace(
    *,
    tenants: Sequence[str] = (),
    jobs: Sequence[str] = (),
    since: datetime | None = None,
    task: str | None = None,
) -> list[ActionRecord]:
    """Finished actions as ``tangram_sim.trace`` records, in submit order; unscoped (operators).

    Times are seconds after the first submit. ``base_s`` is the run time at
    minimum units (the observed run undone by the Amdahl speedup of its units),
    as the simulator keeps it. Types become ``<task>.<type>``, ``task`` being
    each action's job unless one is given, so that a workload with a task per
    job replays the trace. Trajectories are prefixed with the job, since
    clients number them per job. A requeued action keeps its last attempt's run.
    """
    actions = Action.objects.filter(
        state__in=TRACED_STATES, started_at__isnull=False, finished_at__isnull=False
    )
    if tenants:
        known = set(Tenant.objects.filter(name__in=tenants).values_list("name", flat=True))
        unknown = [name for name in tenants if name not in known]
        if unknown:
            raise ApplicationError(f"No tenant named {unknown[0]!r}.", field="tenant")
        actions = actions.filter(tenant__name__in=tenants)
    if jobs:
        actions = actions.filter(job__in=jobs)
    if since is not None:
        actions = actions.filter(submitted_at__gte=since)
    rows = actions.order_by("submitted_at", "id").values(
        "id",
        "tenant__name",
        "job",
        "trajectory",
        "type",
        "submitted_at",
        "started_at",
        "finished_at",
        "node__name",
        "units",
        "elasticity",
    )
    records: list[ActionRecord] = []
    start: datetime | None = None
    for row in rows:
        prefix = task or row["job"]
        if not prefix:
            raise ApplicationError(
                f"Action {row['id']} has no job to name its workload task; give a task name.",
                field="task",
            )
        start = start or row["submitted_at"]
        run_s = max((row["finished_at"] - row["started_at"]).total_seconds(), 0.0)
        elasticity = Elasticity(**row["elasticity"]) if row["elasticity"] else Elasticity()
        records.append(
            ActionRecord(
                id=str(row["id"]),
                tenant=row["tenant__name"],
                type=f"{prefix}.{row['type']}",
                submitted=(row["submitted_at"] - start).total_seconds(),
                started=(row["started_at"] - start).total_seconds(),
                finished=(row["finished_at"] - start).total_seconds(),
                node=row["node__name"] or "",
                units=row["units"],
                base_s=work_at_min_units(elasticity, run_s, row["units"]),
                trajectory=f"{row['job']}/{row['trajectory']}" if row["trajectory"] else "",
            )
        )
    return records
