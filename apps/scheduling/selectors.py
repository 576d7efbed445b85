"""The scheduler's read: one consistent snapshot of what a round can change.

A round hands the policy what the simulator hands it (the ``Snapshot``
contract's partial view): only the online nodes that could take some queued
action now (one of its types, room for its demand), each with that room as
its capacity and, in its GPU groups, only the ids no placed action holds;
tenant usage as one entry per tenant; the pool's total capacity. Full nodes
and the rows of running actions never reach the policy, except elastic
actions whose cores can change (``Snapshot.resizable``), with their nodes
where what they could give back would take a queued action or where they
could grow. When no node could take anything the queue itself is not read: a
wake-up that cannot place anything costs a few small queries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Max, TextField, Window
from django.db.models.functions import Cast, RowNumber
from django.utils import timezone

from apps.actions.models import (
    PLACED_STATES,
    Action,
    ActionBatchStat,
    ActionDurationStat,
    ActionLoadStat,
    ActionState,
    TrajectoryPositionStat,
)
from apps.actions.selectors import PlacedUsage, add_resources, placed_gpus, placed_usage
from apps.inventory.models import Node, WarmKeyUse
from apps.tenants.models import Quota
from tangram_agent.protocol import GPU_RESIZE_PROTOCOL, RESIZE_PROTOCOL, SHRINK_PROTOCOL
from tangram_policy.estimate import decayed_mean, speedup, trajectory_stat
from tangram_policy.pool import gpu_group_positions, gpu_group_size, primary_kind
from tangram_policy.registry import keeps_gpu_groups
from tangram_policy.types import (
    EPSILON,
    RESIZABLE_KINDS,
    BatchStat,
    DurationStat,
    Elasticity,
    PendingAction,
    Resizable,
    Resources,
    RunningAction,
    Snapshot,
    TenantQuota,
    TrajectoryStat,
    TypeLoad,
)
from tangram_policy.types import Node as PolicyNode

#: The policy sees at most this many queued actions per round, highest priority and oldest first.
MAX_PENDING_PER_ROUND = 10_000
NOT_ELASTIC = Elasticity()


class _Decoded:
    """JSON columns read as text and decoded once per distinct value.

    A queue holds thousands of actions of a few kinds: decoding each row's
    demand anew was most of a round's read, and shared objects also let the
    policy group alike actions by identity.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], Any] = {}

    def get(self, column: str, text: str | None, build: Callable[[Any], Any] | None = None) -> Any:
        key = (column, text or "")
        value = self._seen.get(key, self)
        if value is self:
            raw = json.loads(text) if text else None
            value = self._seen[key] = build(raw) if build is not None else raw
        return value


def _elasticity(raw: dict[str, Any] | None) -> Elasticity:
    return Elasticity(**raw) if raw else NOT_ELASTIC


def _as_text(column: str) -> Cast:
    return Cast(column, output_field=TextField())


def _quotas() -> dict[str, TenantQuota]:
    by_tenant: dict[str, dict[str, Quota]] = {}
    for quota in Quota.objects.all():
        by_tenant.setdefault(str(quota.tenant_id), {})[quota.resource] = quota
    out = {}
    # The policy takes one weight per tenant: the mean of its rows' weights.
    for tenant, quotas in by_tenant.items():
        weights = [q.weight for q in quotas.values()]
        out[tenant] = TenantQuota(
            tenant=tenant,
            guaranteed={k: q.guaranteed for k, q in quotas.items()},
            limit={k: q.limit for k, q in quotas.items()},
            weight=sum(weights) / len(weights),
            lending_limit={
                k: q.lending_limit for k, q in quotas.items() if q.lending_limit is not None
            },
        )
    return out


def _duration_stats() -> dict[tuple[str, str], DurationStat]:
    return {
        (str(tenant_id), action_type): DurationStat(count=count, mean_s=mean_s)
        for tenant_id, action_type, count, mean_s in ActionDurationStat.objects.values_list(
            "tenant_id", "type", "count", "mean_s"
        )
    }


def _trajectory_stats(
    pending: tuple[PendingAction, ...],
) -> dict[tuple[str, str], TrajectoryStat]:
    """What the ended trajectories ran after each position and type, for the jobs
    of queued actions whose rest is learned (a position, no ``remaining_hint_s``)."""
    jobs = {
        (action.tenant, action.job)
        for action in pending
        if action.position is not None and action.remaining_hint_s is None
    }
    if not jobs:
        return {}
    after: dict[tuple[str, str], dict[tuple[int, str], tuple[int, float]]] = {}
    for tenant_id, job, position, type_, count, rest_s in TrajectoryPositionStat.objects.filter(
        job__in={job for _, job in jobs}
    ).values_list("tenant_id", "job", "position", "type", "count", "rest_s"):
        key = (str(tenant_id), job)
        if key in jobs:
            after.setdefault(key, {})[(position, type_)] = (count, rest_s)
    return {key: trajectory_stat(rests) for key, rests in after.items()}


def _batch_stats() -> dict[tuple[str, str], BatchStat]:
    return {
        (str(tenant_id), action_type): BatchStat(count=count, marginal=marginal)
        for tenant_id, action_type, count, marginal in ActionBatchStat.objects.filter(
            count__gt=0
        ).values_list("tenant_id", "type", "count", "marginal")
    }


def _warm_used_at(held: Mapping[str, int]) -> dict[str, float]:
    """When a round last placed an action with each key some node holds."""
    return {
        key: used_at.timestamp()
        for key, used_at in WarmKeyUse.objects.filter(key__in=list(held)).values_list(
            "key", "used_at"
        )
    }


def _with_setups(
    nodes: list[PolicyNode], warm_nodes: dict[str, int], now: datetime
) -> list[PolicyNode]:
    """``nodes`` with the keys they are still setting up (``Node.setting_up``, among
    their warm keys, as the simulator has them), and those keys counted in
    ``warm_nodes`` for every online node setting them up, listed or not.

    A key is setting up on a node for the ``setup_hint_s`` of an action placed
    there with it, from its placement, unless the node's agent has reported it
    (an agent reports a key only once it is ready). The hint bounds it, as in
    the simulator: a key no agent reports (only resident scorers' are) would
    otherwise count as setting up for as long as one of its actions runs there.
    """
    hinted = Action.objects.filter(
        state__in=PLACED_STATES, setup_hint_s__gt=0, node__state=Node.State.ONLINE
    ).exclude(affinity=[])
    longest = hinted.aggregate(longest=Max("setup_hint_s"))["longest"]
    if longest is None:
        return nodes
    starting: dict[str, set[str]] = {}
    for node_id, reported, affinity, assigned_at, setup_s in (
        hinted.filter(assigned_at__gt=now - timedelta(seconds=longest))
        .values_list("node_id", "node__warm", "affinity", "assigned_at", "setup_hint_s")
        .order_by()
    ):
        if assigned_at + timedelta(seconds=setup_s) > now:
            keys = starting.setdefault(str(node_id), set())
            for key in set(affinity) - set(reported) - keys:
                keys.add(key)
                warm_nodes[key] = warm_nodes.get(key, 0) + 1
    return [
        replace(node, warm=node.warm | starting[node.id], setting_up=frozenset(starting[node.id]))
        if starting.get(node.id)
        else node
        for node in nodes
    ]


def _type_loads(
    decoded: _Decoded, pending: Sequence[PendingAction], now: datetime
) -> dict[tuple[str, str], TypeLoad]:
    """Per (tenant, type): what its placed actions hold of its primary kind and its
    queued ones ask (at minimum units), its mean held, brought up to ``now`` from
    ``ActionLoadStat`` (what the latest round saw it hold, held since), its job:
    the one its actions now are of, else the one the latest round saw ("": several),
    and one action's demand: one of those now, else the one the latest round saw."""
    #: (tenant, type) -> [kind, held, queued, job ("": several jobs'), demand]
    amounts: dict[tuple[str, str], list[Any]] = {}

    def amount(key: tuple[str, str], demand: Resources, job: str) -> list[Any]:
        entry = amounts.setdefault(key, [primary_kind(demand), 0.0, 0.0, job, demand])
        if entry[3] != job:
            entry[3] = ""
        return entry

    placed = (
        Action.objects.filter(state__in=PLACED_STATES)
        .annotate(demand_text=_as_text("demand"))
        .values_list("tenant_id", "type", "job", "demand_text")
        .annotate(count=Count("id"))
        .order_by()
    )
    for tenant_id, type_, job, text, count in placed:
        demand = decoded.get("demand", text) or {}
        entry = amount((str(tenant_id), type_), demand, job)
        entry[1] += float(demand.get(entry[0], 0.0)) * count
    for action in pending:
        entry = amount((action.tenant, action.type), action.demand, action.job)
        entry[2] += action.demand.get(entry[0], 0.0)
    loads: dict[tuple[str, str], TypeLoad] = {}
    for row in ActionLoadStat.objects.values_list(
        "tenant_id", "type", "job", "kind", "demand", "held", "mean_held", "updated_at"
    ):
        tenant_id, type_, job, kind, demand, held, mean_held, updated_at = row
        key = (str(tenant_id), type_)
        mean = decayed_mean(mean_held, held, (now - updated_at).total_seconds())
        kind, held_now, queued, job, demand = amounts.pop(key, (kind, 0.0, 0.0, job, demand))
        loads[key] = TypeLoad(kind, held_now, queued, mean, job, demand)
    for key, (kind, held_now, queued, job, demand) in amounts.items():
        loads[key] = TypeLoad(kind, held_now, queued, 0.0, job, demand)
    return loads


def _queued_demands(decoded: _Decoded) -> dict[str, list[Resources]]:
    """Per action type, the distinct demands queued (a few, however long the queue)."""
    demands: dict[str, list[Resources]] = {}
    for type_, text in (
        Action.objects.filter(state=ActionState.QUEUED)
        .annotate(demand_text=_as_text("demand"))
        .values_list("type", "demand_text")
        .order_by()
        .distinct()
    ):
        demands.setdefault(type_, []).append(decoded.get("demand", text) or {})
    return demands


def _fits(demand: Mapping[str, Any], room: Resources) -> bool:
    return all(float(amount) <= room.get(kind, 0.0) + EPSILON for kind, amount in demand.items())


def _can_take(room: Resources, executors: list[str], demands: dict[str, list[Resources]]) -> bool:
    return any(_fits(demand, room) for type_ in executors for demand in demands.get(type_, ()))


def _pending(decoded: _Decoded) -> tuple[PendingAction, ...]:
    """Queued actions, at most ``MAX_PENDING_PER_ROUND``, in the policy's terms.

    ``may_shrink_gpus`` lends a run extra GPUs of other tenants' idle
    guarantees, which only agents of protocol 6 can take back: while an online
    GPU node's agent is older, no queued action says so to the policy.
    """
    rows = list(
        Action.objects.filter(state=ActionState.QUEUED)
        .order_by("-priority", "submitted_at")
        .annotate(
            demand_text=_as_text("demand"),
            elasticity_text=_as_text("elasticity"),
            affinity_text=_as_text("affinity"),
        )
        .values_list(
            "id",
            "tenant_id",
            "type",
            "demand_text",
            "submitted_at",
            "priority",
            "job",
            "trajectory",
            "duration_hint_s",
            "remaining_hint_s",
            "position",
            "elasticity_text",
            "affinity_text",
            "batch_key",
            "batch_limit",
            "setup_hint_s",
            "may_split_gpus",
            "may_shrink_gpus",
        )[:MAX_PENDING_PER_ROUND]
    )
    gpus_come_back = not (
        any(row[-1] for row in rows)
        and Node.objects.filter(state=Node.State.ONLINE, protocol__lt=GPU_RESIZE_PROTOCOL)
        .exclude(gpu_groups=[])
        .exists()
    )
    return tuple(
        PendingAction(
            id=str(id_),
            tenant=str(tenant_id),
            type=type_,
            demand=decoded.get("demand", demand),
            submitted_at=submitted_at.timestamp(),
            priority=priority,
            job=job,
            trajectory=trajectory,
            duration_hint_s=hint,
            remaining_hint_s=remaining,
            position=position,
            elasticity=decoded.get("elasticity", elasticity, _elasticity),
            affinity=decoded.get("affinity", affinity, lambda raw: frozenset(raw or ())),
            batch_key=batch_key or None,
            batch_limit=batch_limit,
            setup_s=setup_hint or 0.0,
            may_split_gpus=may_split_gpus,
            may_shrink_gpus=may_shrink_gpus and gpus_come_back,
        )
        for (
            id_,
            tenant_id,
            type_,
            demand,
            submitted_at,
            priority,
            job,
            trajectory,
            hint,
            remaining,
            position,
            elasticity,
            affinity,
            batch_key,
            batch_limit,
            setup_hint,
            may_split_gpus,
            may_shrink_gpus,
        ) in rows
    )


def _free_gpu_groups(
    nodes: list[PolicyNode], groups: dict[str, list[list[str]]]
) -> list[PolicyNode]:
    """``nodes`` with their GPU groups less the ids placed actions hold.

    A group keeps its place when it is left empty: the policy finds a GPU's
    group by position.
    """
    if not groups:
        return nodes
    held = {str(node_id): gpus for node_id, gpus in placed_gpus(node_ids=list(groups)).items()}
    out = []
    for node in nodes:
        node_groups = groups.get(node.id)
        if node_groups:
            taken = held.get(node.id, set())
            free = tuple(tuple(gpu for gpu in group if gpu not in taken) for group in node_groups)
            node = replace(node, gpu_groups=free, gpu_group_size=gpu_group_size(node_groups))
        out.append(node)
    return out


def work_done_s(
    elasticity: Elasticity,
    units: int,
    started_at: datetime | None,
    resized_at: datetime | None,
    done_at_resize_s: float,
    now: datetime,
) -> float:
    """A running elastic action's work done, in seconds at its minimum units: what it
    had done when its units last changed, plus the time since at their speed."""
    since = resized_at or started_at
    if since is None:
        return done_at_resize_s
    return done_at_resize_s + max((now - since).total_seconds(), 0.0) * speedup(elasticity, units)


def _resizable(decoded: _Decoded, now: datetime) -> list[Resizable]:
    """Placed single elastic actions whose cores can change, on online nodes whose
    agent takes ``shrink`` (those holding more than their minimum) or ``resize``
    (any: they may also grow). An older agent's are offered capped at their units.

    Also those submitted with ``may_shrink_gpus`` that hold more GPUs than their
    minimum, on nodes whose agent tells a run which GPUs it keeps: offered
    capped at their units, with the ids they hold.
    """
    rows = (
        Action.objects.filter(
            state__in=PLACED_STATES,
            batch_id="",
            node__state=Node.State.ONLINE,
            node__protocol__gte=SHRINK_PROTOCOL,
        )
        .exclude(elasticity={})
        .order_by("assigned_at", "id")
        .annotate(allocation_text=_as_text("allocation"), elasticity_text=_as_text("elasticity"))
        .values_list(
            "id",
            "tenant_id",
            "node_id",
            "allocation_text",
            "units",
            "elasticity_text",
            "type",
            "duration_hint_s",
            "started_at",
            "resized_at",
            "done_at_resize_s",
            "node__protocol",
            "may_shrink_gpus",
            "gpus",
            "node__gpu_groups",
        )
    )
    out = []
    for row in rows:
        id_, tenant_id, node_id, allocation, units, elasticity_text = row[:6]
        type_, hint, started, resized, done_at_resize, protocol = row[6:12]
        may_shrink_gpus, gpus, node_groups = row[12:]
        elasticity = decoded.get("elasticity", elasticity_text, _elasticity)
        held_gpus: tuple[str, ...] = tuple(map(str, gpus))
        positions = gpu_group_positions(node_groups, held_gpus) if may_shrink_gpus else None
        gives_gpus_back = (
            may_shrink_gpus
            and elasticity.unit_kind == "gpu"
            and protocol >= GPU_RESIZE_PROTOCOL
            and len(held_gpus) == units
            and positions is not None
        )
        if elasticity.unit_kind not in RESIZABLE_KINDS and not gives_gpus_back:
            continue
        done_s = work_done_s(elasticity, units, started, resized, done_at_resize, now)
        if protocol < RESIZE_PROTOCOL or gives_gpus_back:
            elasticity = replace(elasticity, max_units=units)
        if elasticity.min_units < units or units < elasticity.max_units:
            out.append(
                Resizable(
                    str(id_),
                    str(tenant_id),
                    str(node_id),
                    decoded.get("allocation", allocation),
                    units,
                    elasticity,
                    type_,
                    hint,
                    done_s,
                    held_gpus if gives_gpus_back else (),
                    (positions or ()) if gives_gpus_back else (),
                )
            )
    return out


def scheduling_snapshot() -> Snapshot:
    now = timezone.now()
    decoded = _Decoded()
    placed = placed_usage()
    demands = _queued_demands(decoded)
    resizable = _resizable(decoded, now)
    #: Per node, the room its resizable actions could give back.
    returnable: dict[str, dict[str, float]] = {}
    #: Per node, the (kind, unit) of the actions there that may grow.
    growable: dict[str, set[tuple[str, float]]] = {}
    for held in resizable:
        extra = returnable.setdefault(held.node, {})
        extra[held.unit_kind] = extra.get(held.unit_kind, 0.0) + held.extra
        if held.units < held.elasticity.max_units:
            growable.setdefault(held.node, set()).add((held.unit_kind, held.unit))
    capacity: dict[str, float] = {}
    useful: list[PolicyNode] = []
    gpu_groups: dict[str, list[list[str]]] = {}
    #: Per warm key, the online nodes that hold it, listed or not (full ones).
    warm_nodes: dict[str, int] = {}
    for node_id, node_capacity, executors, warm, warm_slots, groups in (
        Node.objects.filter(state=Node.State.ONLINE)
        .order_by("name")
        .values_list("id", "capacity", "executors", "warm", "warm_slots", "gpu_groups")
    ):
        add_resources(capacity, node_capacity)
        for key in warm:
            warm_nodes[key] = warm_nodes.get(key, 0) + 1
        room = placed.free_on(node_id, node_capacity)
        extra = returnable.get(str(node_id))
        if (
            _can_take(room, executors, demands)
            or (
                extra is not None
                and _can_take(
                    {k: room.get(k, 0.0) + extra.get(k, 0.0) for k in {*room, *extra}},
                    executors,
                    demands,
                )
            )
            or any(
                room.get(kind, 0.0) + EPSILON >= unit
                for kind, unit in growable.get(str(node_id), ())
            )
        ):
            useful.append(
                PolicyNode(
                    str(node_id),
                    room,
                    frozenset(executors),
                    frozenset(warm),
                    warm_slots=warm_slots,
                )
            )
            if groups:
                gpu_groups[str(node_id)] = groups
    running = tuple(
        RunningAction(f"usage:{tenant}", str(tenant), "", "", used, 0.0)
        for tenant, used in sorted(placed.by_tenant.items())
    )
    listed = {node.id for node in useful}
    pending = _pending(decoded) if useful and demands else ()
    if any(a.setup_s > 0 and a.affinity for a in pending):
        useful = _with_setups(useful, warm_nodes, now)
    return Snapshot(
        now=now.timestamp(),
        nodes=tuple(_free_gpu_groups(useful, gpu_groups)),
        quotas=_quotas(),
        pending=pending,
        running=running,
        duration_stats=_duration_stats(),
        # Each read only when a queued action could use it.
        batch_stats=_batch_stats() if any(a.batch_key for a in pending) else {},
        warm_used_at=_warm_used_at(warm_nodes)
        if any(a.setup_s > 0 and a.affinity for a in pending)
        else {},
        type_loads=_type_loads(decoded, pending, now),
        trajectory_stats=_trajectory_stats(pending),
        capacity=capacity,
        resizable=tuple(held for held in resizable if held.node in listed),
        warm_nodes=warm_nodes,
    )


def queue_heads_waiting(
    *, tenant_id: Any = None, placed: PlacedUsage | None = None
) -> dict[Any, str]:
    """Per tenant id (or for one), why its next queued action waits: the one the
    scheduler reads first, highest priority, then oldest. ``placed``: the caller's
    read of placed usage, if it has one."""
    queued = Action.objects.filter(state=ActionState.QUEUED)
    if tenant_id is not None:
        queued = queued.filter(tenant_id=tenant_id)
    heads = list(
        queued.annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("tenant_id")],
                order_by=[F("priority").desc(), F("submitted_at").asc(), F("id").asc()],
            )
        ).filter(rank=1)
    )
    reasons = waiting_reasons(actions=heads, placed=placed)
    return {head.tenant_id: reasons[head.id] for head in heads}


def waiting_reasons(
    *, actions: Sequence[Action], placed: PlacedUsage | None = None
) -> dict[Any, str]:
    """Why each queued one of ``actions`` is not placed yet, checked as an operator would:
    a node that runs its type, one large enough, its tenant's limit, room now,
    room inside one NVLink group where the policy keeps it to one.

    What the policy alone knows (actions ahead of it, a guarantee it must leave
    free) is named as such, not guessed.
    """
    queued = [action for action in actions if action.state == ActionState.QUEUED]
    if not queued:
        return {}
    nodes = list(
        Node.objects.filter(state=Node.State.ONLINE).values_list(
            "id", "capacity", "executors", "gpu_groups"
        )
    )
    if placed is None:
        placed = placed_usage()
    limits: dict[Any, dict[str, float]] = {}
    for tenant_id, resource, limit in Quota.objects.filter(
        tenant_id__in={action.tenant_id for action in queued}
    ).values_list("tenant_id", "resource", "limit"):
        limits.setdefault(tenant_id, {})[resource] = limit
    # The nodes' NVLink groups and the GPU ids held there, read only where the
    # policy keeps an action to one group and some queued one asks for several.
    groups: dict[Any, list[list[str]]] = {}
    if keeps_gpu_groups(settings.TANGRAM_POLICY) and any(map(_keeps_to_a_group, queued)):
        groups = {node_id: node_groups for node_id, _, _, node_groups in nodes if node_groups}
    gpus_held = placed_gpus(node_ids=list(groups)) if groups else {}
    return {
        action.id: _waiting_reason(
            action, nodes, placed, limits.get(action.tenant_id, {}), groups, gpus_held
        )
        for action in queued
    }


def _keeps_to_a_group(action: Action) -> bool:
    """Whether a policy that keeps to NVLink groups keeps ``action`` to one."""
    return float(action.demand.get("gpu", 0)) > 1 and not action.may_split_gpus


def _split_only(
    count: int,
    node_ids: list[Any],
    groups: dict[Any, list[list[str]]],
    held: dict[Any, set[str]],
) -> bool:
    """Whether every one of ``node_ids`` (nodes with room for ``count`` GPUs) has
    them free only across its NVLink ``groups``, ``count`` fitting some group."""
    if not node_ids:
        return False
    for node_id in node_ids:
        node_groups = groups.get(node_id)
        if not node_groups or count > max(len(group) for group in node_groups):
            return False  # no groups known, or larger than any: it need not wait for one
        taken = held.get(node_id, set())
        if any(sum(gpu not in taken for gpu in group) >= count for group in node_groups):
            return False
    return True


def _waiting_reason(
    action: Action,
    nodes: list[tuple[Any, dict[str, float], list[str], list[list[str]]]],
    placed: PlacedUsage,
    limits: dict[str, float],
    groups: dict[Any, list[list[str]]],
    gpus_held: dict[Any, set[str]],
) -> str:
    demand = {kind: float(amount) for kind, amount in action.demand.items() if float(amount) > 0}
    asked = ", ".join(f"{amount:g} {kind}" for kind, amount in sorted(demand.items()))
    offering = [
        (node_id, capacity) for node_id, capacity, executors, _ in nodes if action.type in executors
    ]
    if not offering:
        return f"no online node runs {action.type}"
    if not any(_fits(demand, capacity) for _, capacity in offering):
        return f"no online node running {action.type} is large enough for {asked}"
    tenant_used = placed.by_tenant.get(action.tenant_id, {})
    for kind, amount in sorted(demand.items()):
        limit = limits.get(kind)
        held = tenant_used.get(kind, 0.0)
        if limit is not None and held + amount > limit + EPSILON:
            return (
                f"its tenant is at its {kind} limit: it holds {held:g} of {limit:g}, "
                f"and this asks {amount:g} more"
            )
    if not any(_fits(demand, placed.free_on(node_id, capacity)) for node_id, capacity in offering):
        return (
            f"no room now: none of the {len(offering)} online node(s) running {action.type} "
            f"has {asked} free; it starts as placed actions finish"
        )
    if groups and _keeps_to_a_group(action):
        count = int(demand["gpu"])
        roomy = [
            node_id
            for node_id, capacity in offering
            if _fits(demand, placed.free_on(node_id, capacity))
        ]
        if _split_only(count, roomy, groups, gpus_held):
            return (
                f"no NVLink group has {count} GPUs free: the node(s) with {asked} free have "
                "them only across groups, and it keeps to one group; it starts as a group's "
                "GPUs free up (an action that runs as well across groups may say so: "
                "may_split_gpus)"
            )
    return (
        "room is free now: the next scheduling round places it, unless actions ahead of it "
        "(shorter expected work, higher priority, waiting longer) or room kept for another "
        "tenant's guarantee come first, or it waits for a setup of its affinity keys under way "
        "on a node (setup_hint_s)"
    )
