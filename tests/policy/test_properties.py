"""Properties every policy keeps on random states (hypothesis).

Never above a node's capacity or a tenant's limit, every placement valid,
guarantees served first, deterministic for a given state, the same on the
partial view the live scheduler hands over.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tangram_policy.pool import Pool, partial_view
from tangram_policy.registry import POLICIES, get_policy
from tangram_policy.types import EPSILON, Elasticity, PendingAction, Snapshot, TenantQuota
from tests.policy.strategies import snapshots

#: Examples per test from the hypothesis profile (tests/conftest.py).
SETTINGS = settings(suppress_health_check=[HealthCheck.too_slow])


def _check_decision(snapshot: Snapshot, name: str) -> None:
    decision = get_policy(name).decide(snapshot)
    nodes = {node.id: node for node in snapshot.nodes}
    pending = {action.id: action for action in snapshot.pending}
    used: dict[str, dict[str, float]] = {node.id: {} for node in snapshot.nodes}
    usage: dict[str, dict[str, float]] = {}
    for running in snapshot.running:
        for kind, amount in running.allocation.items():
            node_used = used[running.node]
            node_used[kind] = node_used.get(kind, 0.0) + amount
            tenant = usage.setdefault(running.tenant, {})
            tenant[kind] = tenant.get(kind, 0.0) + amount
    before = {tenant: dict(u) for tenant, u in usage.items()}
    #: GPU ids running actions hold, less those given back.
    gpus_taken: dict[str, set[str]] = {}
    for running in snapshot.running:
        gpus_taken.setdefault(running.node, set()).update(running.gpus)
    resizable = {held.action_id: held for held in snapshot.resizable}
    for resize in decision.resizes:
        held = resizable.pop(resize.action_id)  # a resizable action, resized once
        kind = held.unit_kind
        assert resize.node_id == held.node
        assert held.min_units <= resize.units <= held.elasticity.max_units, "not a legal size"
        assert resize.units != held.units, "a resize that changes nothing"
        assert resize.allocation == {**held.allocation, kind: held.unit * resize.units}
        if held.gpus:
            assert resize.units < held.units, "a run that gives GPUs back grown"
            assert len(resize.gpus) == resize.units and set(resize.gpus) <= set(held.gpus)
            gpus_taken[held.node] -= set(held.gpus) - set(resize.gpus)
        given_back = held.allocation[kind] - resize.allocation[kind]
        used[held.node][kind] = used[held.node].get(kind, 0.0) - given_back
        usage[held.tenant][kind] = usage[held.tenant].get(kind, 0.0) - given_back
    seen: set[str] = set()
    batches: dict[str, list[str]] = {}
    for placement in decision.placements:
        assert placement.action_id in pending, "placed an action that is not pending"
        assert placement.action_id not in seen, "placed an action twice"
        seen.add(placement.action_id)
        action = pending[placement.action_id]
        node = nodes[placement.node_id]
        assert action.type in node.executors, "placed on a node that does not run its type"
        elasticity = action.elasticity
        assert elasticity.min_units <= placement.units <= max(elasticity.max_units, 1)
        if placement.batch_id is not None:
            batches.setdefault(placement.batch_id, []).append(placement.node_id)
        for kind, amount in placement.allocation.items():
            assert amount >= 0
            node_used = used[node.id]
            node_used[kind] = node_used.get(kind, 0.0) + amount
            tenant = usage.setdefault(action.tenant, {})
            tenant[kind] = tenant.get(kind, 0.0) + amount
        if placement.gpus and placement.batch_id is None:
            taken = gpus_taken.setdefault(node.id, set())
            assert not taken & set(placement.gpus), "a GPU given to two actions"
            taken |= set(placement.gpus)
            if (
                len(placement.gpus) > 1
                and name.startswith("tangram")
                and name != "tangram-no-topology"
                and not action.may_split_gpus
            ):
                groups = [set(g) for g in node.gpu_groups]
                if len(placement.gpus) <= max(len(g) for g in groups):
                    assert any(set(placement.gpus) <= g for g in groups), "GPUs across groups"
    for node_id, node_used in used.items():
        for kind, amount in node_used.items():
            capacity = nodes[node_id].capacity.get(kind, 0.0)
            # Running actions alone may not exceed it, so any excess is the policy's.
            assert amount <= capacity + 1e-6, f"{node_id} over its {kind}"
    for tenant, tenant_usage in usage.items():
        quota = snapshot.quotas.get(tenant)
        if quota is None:
            continue
        for kind, limit in quota.limit.items():
            added = tenant_usage.get(kind, 0.0) - before.get(tenant, {}).get(kind, 0.0)
            if added > EPSILON:
                assert tenant_usage[kind] <= limit + 1e-6, f"{tenant} over its {kind} limit"
    for node_ids in batches.values():
        assert len(set(node_ids)) == 1, "a batch split across nodes"
    placed_on = {placement.node_id for placement in decision.placements}
    placed_for = {pending[placement.action_id].tenant for placement in decision.placements}
    for resize in decision.resizes:
        held = next(h for h in snapshot.resizable if h.action_id == resize.action_id)
        if resize.units < held.units:
            # Its units make room on its node, or quota for its tenant.
            assert resize.node_id in placed_on or held.tenant in placed_for, (
                "taken back for nothing"
            )


@pytest.mark.parametrize("name", sorted(POLICIES))
@SETTINGS
@given(snapshot=snapshots())
def test_never_over_capacity_or_limit(name: str, snapshot: Snapshot) -> None:
    _check_decision(snapshot, name)


@pytest.mark.parametrize("name", sorted(n for n in POLICIES if n.startswith("tangram")))
@SETTINGS
@given(snapshot=snapshots())
def test_the_partial_view_gives_the_same_decisions(name: str, snapshot: Snapshot) -> None:
    """The live scheduler and the simulator hand each node's free room and per-tenant
    usage, not every running action (``partial_view``): the decisions must not change."""
    policy = get_policy(name)
    assert policy.decide(partial_view(snapshot)) == policy.decide(snapshot)


@SETTINGS
@given(snapshot=snapshots(), seed=st.integers(0, 1000))
def test_deterministic_whatever_the_input_order(snapshot: Snapshot, seed: int) -> None:
    policy = get_policy("tangram")
    first = policy.decide(snapshot)
    assert policy.decide(snapshot) == first
    rng = random.Random(seed)
    pending = list(snapshot.pending)
    nodes = list(snapshot.nodes)
    rng.shuffle(pending)
    rng.shuffle(nodes)
    shuffled = replace(snapshot, pending=tuple(pending), nodes=tuple(nodes))
    assert policy.decide(shuffled) == first


@SETTINGS
@given(
    guaranteed=st.integers(1, 24),
    own=st.integers(0, 24),
    borrowing=st.integers(0, 60),
    cores=st.integers(24, 48),
    lending_limit=st.none() | st.integers(0, 24),
)
def test_a_tenant_within_its_guarantee_is_served_before_borrowers(
    guaranteed: int, own: int, borrowing: int, cores: int, lending_limit: int | None
) -> None:
    """Whatever borrowers want, work within a guarantee that the pool can hold is placed,
    and an idle guarantee is lent no further than its lending limit. The quota names
    cores only: the memory the actions also ask for is not managed, so it does not
    make them borrow."""
    from tangram_policy.types import Node

    own = min(own, guaranteed)
    lendable = guaranteed if lending_limit is None else min(lending_limit, guaranteed)
    quotas = {
        "a": TenantQuota(
            "a",
            {"cpu": float(guaranteed)},
            {"cpu": 100.0},
            lending_limit={} if lending_limit is None else {"cpu": float(lendable)},
        ),
        "b": TenantQuota("b", {}, {"cpu": 100.0}),
    }
    elastic = Elasticity(min_units=1, max_units=4, parallel_fraction=0.9)
    demand = {"cpu": 1.0, "memory": 16.0}
    pending = [
        PendingAction(
            f"b{i}", "b", "python", demand, submitted_at=0.0, priority=2, elasticity=elastic
        )
        for i in range(borrowing)
    ] + [PendingAction(f"a{i}", "a", "python", demand, submitted_at=50.0) for i in range(own)]
    snapshot = Snapshot(
        now=60.0,
        nodes=(Node("n", {"cpu": float(cores), "memory": 1e6}, frozenset({"python"})),),
        quotas=quotas,
        pending=tuple(pending),
        running=(),
    )
    for name in ("tangram", "fifo"):
        placements = get_policy(name).decide(snapshot).placements
        assert {f"a{i}" for i in range(own)} <= {p.action_id for p in placements}
        borrowed = sum(p.allocation["cpu"] for p in placements if p.action_id.startswith("b"))
        bound = cores - own - max(guaranteed - own - lendable, 0)
        assert borrowed <= bound + 1e-9
        if borrowing >= bound:  # and no less: the rest of the idle guarantee is lent
            assert borrowed == pytest.approx(bound)


def test_a_quota_bounds_only_the_kinds_it_names() -> None:
    quota = TenantQuota("a", {"cpu": 4.0}, {"cpu": 8.0, "gpu": 2.0})
    # Memory is not managed; cores are guaranteed, GPUs limited but not guaranteed.
    assert quota.guarantee_bounds({"cpu": 2.0, "memory": 512.0}) == (("cpu", 2.0, 4.0),)
    assert quota.guarantee_bounds({"gpu": 1.0, "memory": 512.0}) == (("gpu", 1.0, 0.0),)
    assert quota.guarantee_bounds({"memory": 512.0}) is None  # nothing managed: it borrows
    assert quota.guarantee_bounds({"cpu": 0.0}) == ()


@SETTINGS
@given(snapshot=snapshots(), data=st.data())
def test_the_room_on_a_set_of_nodes_follows_every_charge(
    snapshot: Snapshot, data: st.DataObject
) -> None:
    """``Pool.room_on`` sums a node set's room once and then keeps it as placements
    (and units taken back, negative) charge its nodes: it must equal a fresh sum."""
    pool = Pool(partial_view(snapshot))
    types = sorted({t for node in pool.nodes.values() for t in node.executors})
    assume(types and pool.free)
    offering = pool.offering(data.draw(st.sampled_from(types)))
    pool.room_on("cpu", offering)
    for _ in range(data.draw(st.integers(1, 6))):
        node = data.draw(st.sampled_from(sorted(pool.free)))
        amount = data.draw(st.floats(-4.0, 4.0))
        pool.charge("t", node, pool.plan({"cpu": amount, "memory": 1.0}))
    fresh = sum(pool.free[n].get("cpu", 0.0) for n in offering if n in pool.free)
    assert pool.room_on("cpu", offering) == pytest.approx(fresh)
