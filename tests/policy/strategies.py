"""Hypothesis strategies for random scheduling states."""

from __future__ import annotations

from hypothesis import strategies as st

from tangram_policy.estimate import trajectory_update
from tangram_policy.pool import gpu_group_positions
from tangram_policy.types import (
    BatchStat,
    DurationStat,
    Elasticity,
    Node,
    PendingAction,
    Resizable,
    RunningAction,
    Snapshot,
    TenantQuota,
    TrajectoryStat,
    TypeLoad,
)

TENANTS = ("a", "b", "c")
TYPES = ("python", "tests", "reward")
#: Jobs actions and type loads are of ("": none named): room kept within one job or not.
JOBS = ("", "run-1", "run-2")
WARM_KEYS = ("image:a", "image:b", "model:rm")


@st.composite
def nodes(draw: st.DrawFn, index: int) -> Node:
    gpus = draw(st.sampled_from((0, 0, 2, 4, 8)))
    capacity: dict[str, float] = {
        "cpu": float(draw(st.integers(1, 32))),
        "memory": float(draw(st.integers(1, 64)) * 1024),
    }
    groups: tuple[tuple[str, ...], ...] = ()
    if gpus:
        capacity["gpu"] = float(gpus)
        ids = [f"n{index}:g{i}" for i in range(gpus)]
        size = draw(st.sampled_from([s for s in (1, 2, 4, 8) if s <= gpus]))
        groups = tuple(tuple(ids[i : i + size]) for i in range(0, gpus, size))
    executors = frozenset(draw(st.sets(st.sampled_from(TYPES), min_size=1)))
    warm = frozenset(draw(st.sets(st.sampled_from(WARM_KEYS))))
    warm_slots = draw(st.sampled_from((0, 0, 1, 2, 3)))
    setting_up = frozenset(draw(st.sets(st.sampled_from(sorted(warm))))) if warm else frozenset()
    return Node(
        f"n{index}", capacity, executors, warm, groups, warm_slots=warm_slots, setting_up=setting_up
    )


@st.composite
def pending_actions(draw: st.DrawFn, index: int) -> PendingAction:
    action_type = draw(st.sampled_from(TYPES))
    demand: dict[str, float] = {
        "cpu": float(draw(st.integers(1, 8))),
        "memory": float(draw(st.integers(0, 8)) * 512),
    }
    if action_type == "reward" and draw(st.booleans()):
        demand["gpu"] = float(draw(st.integers(1, 4)))
    max_units = draw(st.integers(1, 8))
    return PendingAction(
        id=f"p{index}",
        tenant=draw(st.sampled_from(TENANTS)),
        type=action_type,
        demand=demand,
        submitted_at=float(draw(st.integers(0, 100))),
        priority=draw(st.integers(0, 2)),
        job=draw(st.sampled_from(JOBS)),
        duration_hint_s=draw(st.none() | st.floats(0.1, 100.0)),
        remaining_hint_s=draw(st.none() | st.floats(0.0, 600.0)),
        position=draw(st.none() | st.integers(0, 6)),
        elasticity=Elasticity(
            min_units=1,
            max_units=max_units,
            parallel_fraction=draw(st.floats(0.0, 1.0)),
            unit_kind="gpu" if demand.get("gpu") else "cpu",
        ),
        affinity=frozenset(draw(st.sets(st.sampled_from(("image:a", "image:b")), max_size=1))),
        batch_key="rm" if action_type == "reward" and draw(st.booleans()) else None,
        batch_limit=draw(st.integers(1, 8)),
        # Now is 200: a 300 s setup is longer than any wait, so a cold placement may wait.
        setup_s=draw(st.sampled_from((0.0, 30.0, 300.0))),
        may_split_gpus=bool(demand.get("gpu")) and draw(st.booleans()),
        may_shrink_gpus=demand.get("gpu") == 1.0 and draw(st.booleans()),
    )


@st.composite
def quotas(draw: st.DrawFn) -> dict[str, TenantQuota]:
    out: dict[str, TenantQuota] = {}
    for tenant in draw(st.sets(st.sampled_from(TENANTS))):
        guaranteed = {"cpu": float(draw(st.integers(0, 32))), "gpu": float(draw(st.integers(0, 4)))}
        limit = {
            "cpu": guaranteed["cpu"] + draw(st.integers(0, 64)),
            "gpu": guaranteed["gpu"] + draw(st.integers(0, 8)),
        }
        out[tenant] = TenantQuota(
            tenant,
            guaranteed,
            limit,
            weight=draw(st.sampled_from((0.5, 1.0, 2.0))),
            lending_limit=draw(
                st.sampled_from(({}, {"cpu": 0.0}, {"cpu": guaranteed["cpu"] / 2}, {"gpu": 0.0}))
            ),
        )
    return out


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    node_list = [draw(nodes(i)) for i in range(draw(st.integers(1, 6)))]
    pending = [draw(pending_actions(i)) for i in range(draw(st.integers(0, 40)))]
    running: list[RunningAction] = []
    resizable: list[Resizable] = []
    cores: dict[str, float] = {}
    free_gpus = {node.id: [g for group in node.gpu_groups for g in group] for node in node_list}
    for i in range(draw(st.integers(0, 6))):
        node = draw(st.sampled_from(node_list))
        cpu = float(draw(st.integers(0, int(node.capacity["cpu"]))))
        # Keep running actions within each node's capacity, as the scheduler would.
        if cores.get(node.id, 0.0) + cpu > node.capacity["cpu"]:
            continue
        cores[node.id] = cores.get(node.id, 0.0) + cpu
        allocation = {"cpu": cpu}
        held: tuple[str, ...] = ()
        count = draw(st.integers(0, len(free_gpus[node.id])))
        if count:
            allocation["gpu"] = float(count)
            if draw(st.booleans()):  # GPU ids known (the simulator), else not (live)
                held = tuple(draw(st.permutations(free_gpus[node.id]))[:count])
                free_gpus[node.id] = [g for g in free_gpus[node.id] if g not in held]
            else:  # unknown ids are taken as filling the groups in order
                free_gpus[node.id] = free_gpus[node.id][count:]
        tenant = draw(st.sampled_from(TENANTS))
        running.append(
            RunningAction(
                f"r{i}",
                tenant,
                draw(st.sampled_from(sorted(node.executors))),
                node.id,
                allocation,
                0.0,
                gpus=held,
            )
        )
        if len(held) >= 2 and draw(st.booleans()):  # a run that can give GPUs back
            units = len(held)
            elasticity = Elasticity(
                draw(st.integers(1, units - 1)),
                units + draw(st.integers(0, 2)),
                draw(st.floats(0.0, 1.0)),
                unit_kind="gpu",
            )
            type_, gpus = "reward", held
        elif cpu >= 2 and draw(st.booleans()):  # an elastic action at one unit per core
            units = int(cpu)
            elasticity = Elasticity(
                draw(st.integers(1, units)),
                units + draw(st.integers(0, 4)),
                draw(st.floats(0.0, 1.0)),
            )
            type_, gpus = draw(st.sampled_from(TYPES)), ()
        else:
            continue
        resizable.append(
            Resizable(
                f"r{i}",
                tenant,
                node.id,
                allocation,
                units,
                elasticity,
                type_,
                done_s=draw(st.floats(0.0, 120.0)),
                gpus=gpus,
                gpu_groups=gpu_group_positions(node.gpu_groups, gpus) or (),
            )
        )
    stats = {
        (tenant, kind): DurationStat(draw(st.integers(1, 50)), draw(st.floats(0.5, 60.0)))
        for tenant in TENANTS
        for kind in TYPES
        if draw(st.booleans())
    }
    return Snapshot(
        now=200.0,
        nodes=tuple(node_list),
        quotas=draw(quotas()),
        pending=tuple(pending),
        running=tuple(running),
        duration_stats=stats,
        resizable=tuple(resizable),
        # Keys held by nodes listed or not (full ones).
        warm_nodes={key: draw(st.integers(0, 2)) for key in WARM_KEYS},
        warm_used_at={
            key: draw(st.floats(-200.0, 200.0)) for key in WARM_KEYS if draw(st.booleans())
        },
        # What batching reward calls has cost, where learned (past 0.5: batches sized).
        batch_stats={
            (tenant, "reward"): BatchStat(draw(st.integers(1, 50)), draw(st.floats(0.0, 1.0)))
            for tenant in TENANTS
            if draw(st.booleans())
        },
        # What types held and asked lately, where known: room kept for short ones.
        type_loads={
            (tenant, kind): TypeLoad(
                draw(st.sampled_from(("cpu", "gpu"))),
                draw(st.floats(0.0, 8.0)),
                draw(st.floats(0.0, 8.0)),
                draw(st.floats(0.0, 16.0)),
                draw(st.sampled_from(JOBS)),
            )
            for tenant in TENANTS
            for kind in TYPES
            if draw(st.booleans())
        },
        # What jobs' ended trajectories ran after each position and type, where learned.
        trajectory_stats={
            (tenant, job): draw(trajectory_stats())
            for tenant in TENANTS
            for job in JOBS
            if draw(st.booleans())
        },
    )


@st.composite
def trajectory_stats(draw: st.DrawFn) -> TrajectoryStat:
    """What a few ended trajectories of random types and runs leave."""
    stat = None
    for _ in range(draw(st.integers(1, 5))):
        runs = draw(st.lists(st.tuples(st.sampled_from(TYPES), st.floats(0.0, 300.0)), max_size=6))
        stat = trajectory_update(stat, [(at, type_, s) for at, (type_, s) in enumerate(runs)])
    assert stat is not None
    return stat
