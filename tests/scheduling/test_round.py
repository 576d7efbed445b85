"""The live scheduling round on Postgres: invariants of what it commits."""

from __future__ import annotations

import math
import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.actions.models import Action, ActionDurationStat, ActionEvent, ActionLoadStat
from apps.actions.selectors import placed_usage
from apps.actions.services import actions_submit
from apps.inventory.models import WarmKeyUse
from apps.inventory.services import nodes_reap_lost
from apps.scheduling.selectors import scheduling_snapshot
from apps.scheduling.services import WRITE_CHUNK, _assign, schedule_round
from apps.tenants.services import quota_set
from tangram_agent.protocol import RESIZE_PROTOCOL, scorer_warm_key
from tangram_policy.estimate import LOAD_WINDOW_S
from tangram_policy.registry import get_policy
from tangram_policy.types import Placement
from tests.factories import ActionFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db


def _cpu_by_tenant() -> dict[int, float]:
    used: dict[int, float] = {}
    for tenant_id, allocation in Action.objects.filter(
        state__in=["assigned", "running"]
    ).values_list("tenant_id", "allocation"):
        used[tenant_id] = used.get(tenant_id, 0.0) + allocation.get("cpu", 0.0)
    return used


def test_round_never_exceeds_node_capacity():
    nodes = [NodeFactory(capacity={"cpu": 3, "memory": 1000}) for _ in range(2)]
    tenant = TenantFactory()
    ActionFactory.create_batch(20, tenant=tenant, demand={"cpu": 1, "memory": 300})
    report = schedule_round()
    assert report.placed == 6  # memory binds: 3 per node
    for node in nodes:
        used = placed_usage(node_ids=[node.id]).by_node.get(node.id, {})
        assert used["cpu"] <= 3 and used["memory"] <= 1000
    assert schedule_round().placed == 0
    assert ActionEvent.objects.filter(state="assigned").count() == 6


def test_tenant_never_above_its_limit():
    NodeFactory(capacity={"cpu": 16, "memory": 100_000})
    tenant = TenantFactory()
    quota_set(tenant=tenant, resource="cpu", guaranteed=1, limit=3)
    ActionFactory.create_batch(10, tenant=tenant, demand={"cpu": 1})
    schedule_round()
    assert _cpu_by_tenant() == {tenant.id: 3.0}


def test_guaranteed_tenant_is_served_before_borrowers():
    NodeFactory(capacity={"cpu": 4, "memory": 100_000})
    borrower = TenantFactory(name="borrower")
    guaranteed = TenantFactory(name="guaranteed")
    quota_set(tenant=borrower, resource="cpu", guaranteed=0, limit=4)
    quota_set(tenant=guaranteed, resource="cpu", guaranteed=2, limit=4)
    # The borrower submitted first, yet the guaranteed tenant gets its share.
    ActionFactory.create_batch(4, tenant=borrower, demand={"cpu": 1})
    ActionFactory.create_batch(4, tenant=guaranteed, demand={"cpu": 1})
    schedule_round()
    assert _cpu_by_tenant() == {guaranteed.id: 2.0, borrower.id: 2.0}


def test_a_core_quota_guarantees_actions_that_also_ask_for_memory():
    """A quota on cores alone (the README's ``--quota cpu=4:16``): memory has no quota
    row, so it bounds nothing, and the guarantee comes first (fair share alone: 2 and 2)."""
    NodeFactory(capacity={"cpu": 4, "memory": 100_000})
    borrower = TenantFactory(name="borrower")
    guaranteed = TenantFactory(name="guaranteed")
    quota_set(tenant=guaranteed, resource="cpu", guaranteed=3, limit=4)
    ActionFactory.create_batch(4, tenant=borrower, demand={"cpu": 1, "memory": 16})
    ActionFactory.create_batch(4, tenant=guaranteed, demand={"cpu": 1, "memory": 16})
    schedule_round()
    assert _cpu_by_tenant() == {guaranteed.id: 3.0, borrower.id: 1.0}


@pytest.mark.parametrize(("lending_limit", "borrowed"), [(0, 1.0), (1, 2.0), (None, 4.0)])
def test_borrowers_take_an_idle_guarantee_only_up_to_its_lending_limit(lending_limit, borrowed):
    NodeFactory(capacity={"cpu": 4, "memory": 100_000})
    borrower = TenantFactory()
    owner = TenantFactory()
    quota_set(tenant=owner, resource="cpu", guaranteed=3, limit=4, lending_limit=lending_limit)
    ActionFactory.create_batch(4, tenant=borrower, demand={"cpu": 1})
    schedule_round()
    assert _cpu_by_tenant() == {borrower.id: borrowed}
    ActionFactory.create_batch(3, tenant=owner, demand={"cpu": 1})
    schedule_round()
    # What was not lent is there the moment its owner asks.
    assert _cpu_by_tenant().get(owner.id, 0.0) == 4.0 - borrowed


def test_work_done_is_kept_across_resizes():
    """Done work, in seconds at minimum units, is run time times the speed of the units
    held at the time: 10 s at 4 units, 5 s at 1, then the rest at 2 (parallel 0.5:
    speedups 1.6, 1 and 4/3)."""
    from datetime import timedelta

    from django.utils import timezone

    from apps.scheduling.services import _resize
    from tangram_policy.types import Resize

    node = NodeFactory(capacity={"cpu": 8, "memory": 100_000}, protocol=RESIZE_PROTOCOL)
    started = timezone.now() - timedelta(seconds=20)
    action = ActionFactory(
        state="running",
        node=node,
        allocation={"cpu": 4, "memory": 16},
        units=4,
        elasticity={"min_units": 1, "max_units": 4, "parallel_fraction": 0.5},
        started_at=started,
    )
    to_units = [(10, 1), (15, 2)]
    for seconds, units in to_units:
        resize = Resize(str(action.pk), str(node.pk), {"cpu": units, "memory": 16}, units)
        _resize([resize], started + timedelta(seconds=seconds))
    action.refresh_from_db()
    assert action.resized_at == started + timedelta(seconds=15)
    assert action.done_at_resize_s == pytest.approx(10 * 1.6 + 5 * 1.0)
    (held,) = scheduling_snapshot().resizable
    ran_since = (timezone.now() - action.resized_at).total_seconds()
    assert held.units == 2
    assert held.done_s == pytest.approx(21.0 + ran_since * 4 / 3, abs=0.2)


def test_only_nodes_offering_the_type_are_used():
    NodeFactory(name="gpu-only", executors=["reward.model"])
    ActionFactory(type="sleep")
    assert schedule_round().placed == 0


def test_lost_lease_requeues_with_a_new_attempt(settings):
    from datetime import timedelta

    from django.utils import timezone

    node = NodeFactory()
    action = ActionFactory(demand={"cpu": 1})
    schedule_round()
    action.refresh_from_db()
    assert action.state == "assigned" and action.node == node
    type(node).objects.filter(pk=node.pk).update(
        last_seen_at=timezone.now() - timedelta(seconds=settings.TANGRAM_LEASE_S + 1)
    )
    assert nodes_reap_lost() == 1
    action.refresh_from_db()
    assert (action.state, action.attempt, action.node) == ("queued", 2, None)


@pytest.mark.django_db(transaction=True)
def test_concurrent_rounds_never_double_place():
    """Two rounds on two real connections: the advisory lock serialises them."""
    assert connection.vendor == "postgresql"
    NodeFactory(capacity={"cpu": 50, "memory": 100_000})
    ActionFactory.create_batch(40, demand={"cpu": 1})
    placed: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            placed.append(schedule_round().placed)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(placed) == 40
    assert Action.objects.filter(state="assigned").count() == 40
    assert ActionEvent.objects.filter(state="assigned").count() == 40


def test_an_elastic_action_gets_more_units_on_an_idle_pool(settings):
    settings.TANGRAM_POLICY = "tangram"
    NodeFactory(capacity={"cpu": 8, "memory": 100_000})
    elastic = ActionFactory(
        demand={"cpu": 1, "memory": 16},
        elasticity={"min_units": 1, "max_units": 4, "parallel_fraction": 0.95, "unit_kind": "cpu"},
        duration_hint_s=60,
    )
    rigid = ActionFactory(demand={"cpu": 1, "memory": 16}, duration_hint_s=60)
    schedule_round()
    elastic.refresh_from_db()
    rigid.refresh_from_db()
    assert elastic.units > 1
    assert elastic.allocation["cpu"] == elastic.units and elastic.allocation["memory"] == 16
    assert (rigid.units, rigid.allocation) == (1, {"cpu": 1, "memory": 16})


def test_the_last_action_of_a_trajectory_goes_ahead_of_one_early_in_another(settings):
    """remaining_hint_s reaches the policy from the database: of two equal actions
    and room for one, the one whose trajectory ends after it is placed, though
    submitted later."""
    settings.TANGRAM_POLICY = "tangram"
    NodeFactory(capacity={"cpu": 1, "memory": 100_000})
    tenant = TenantFactory()
    early = ActionFactory(tenant=tenant, demand={"cpu": 1}, duration_hint_s=5, remaining_hint_s=300)
    last = ActionFactory(tenant=tenant, demand={"cpu": 1}, duration_hint_s=5, remaining_hint_s=0)
    Action.objects.filter(pk=last.pk).update(submitted_at=early.submitted_at + timedelta(seconds=1))
    assert schedule_round().placed == 1
    early.refresh_from_db()
    last.refresh_from_db()
    assert (early.state, last.state) == ("queued", "assigned")


def test_affinity_prefers_the_warm_node(settings):
    settings.TANGRAM_POLICY = "tangram"
    # Best fit alone would pick the tighter cold node.
    NodeFactory(name="cold", capacity={"cpu": 2, "memory": 1_000})
    warm = NodeFactory(name="warm", capacity={"cpu": 16, "memory": 100_000}, warm=["image:x"])
    action = ActionFactory(demand={"cpu": 1}, affinity=["image:x"])
    schedule_round()
    action.refresh_from_db()
    assert action.node == warm


def test_a_reward_action_goes_where_its_scorer_is_resident(settings):
    """Two equal nodes; the cold one sorts first, so it takes a scorer no node holds
    (and is the tighter fit after that): the next call of the resident scorer still
    goes to the node that holds it."""
    settings.TANGRAM_POLICY = "tangram"
    tenant, other = TenantFactory(), TenantFactory()
    code = "def score(samples):\n    return [0.0] * len(samples)\n"
    spec = {
        "type": "reward.python",
        "payload": {"code": code, "sample": 1},
        "demand": {"cpu": 1, "memory": 1024},
        "timeout_s": 60,
    }
    cold = NodeFactory(id=uuid.UUID(int=1), name="a-cold", capacity={"cpu": 4, "memory": 8192})
    warm = NodeFactory(
        id=uuid.UUID(int=2),
        name="b-warm",
        capacity={"cpu": 4, "memory": 8192},
        warm=[scorer_warm_key(str(tenant.pk), code, {})],
    )
    (elsewhere,) = actions_submit(tenant=other, specs=[spec], bulk=False)
    assert schedule_round().placed == 1
    elsewhere.refresh_from_db()
    assert elsewhere.node == cold  # another tenant's scorer: not resident anywhere
    (resident,) = actions_submit(tenant=tenant, specs=[spec], bulk=False)
    assert schedule_round().placed == 1
    resident.refresh_from_db()
    assert resident.node == warm


@pytest.mark.parametrize(("setup_hint_s", "goes_to"), [(30.0, "free-slot"), (None, "full-slots")])
def test_a_cold_setup_with_a_setup_hint_keeps_to_a_free_warm_slot(settings, setup_hint_s, goes_to):
    """Best fit alone picks the tighter node, whose one slot holds another scorer:
    setting a new one up there evicts it. Told what a setup costs, the round
    sets it up where a slot is free instead."""
    settings.TANGRAM_POLICY = "tangram"
    NodeFactory(
        name="full-slots", capacity={"cpu": 2, "memory": 8192}, warm=["m:other"], warm_slots=1
    )
    NodeFactory(name="free-slot", capacity={"cpu": 16, "memory": 8192}, warm_slots=1)
    action = ActionFactory(demand={"cpu": 1}, affinity=["m:x"], setup_hint_s=setup_hint_s)
    assert schedule_round().placed == 1
    action.refresh_from_db()
    assert action.node.name == goes_to


def test_a_cold_action_told_its_setup_waits_for_room_where_its_key_is_warm(settings):
    """The only node with room would evict a key to set this one up, while a full
    node holds it: with a setup hint the action waits for that node's room."""
    settings.TANGRAM_POLICY = "tangram"
    holder = NodeFactory(
        name="holder", capacity={"cpu": 1, "memory": 8192}, warm=["m:x"], warm_slots=1
    )
    ActionFactory(state="running", node=holder, allocation={"cpu": 1})
    NodeFactory(name="elsewhere", capacity={"cpu": 4, "memory": 8192}, warm=["m:y"], warm_slots=1)
    hinted = ActionFactory(demand={"cpu": 1}, affinity=["m:x"], setup_hint_s=30.0)
    assert schedule_round().placed == 0
    assert Action.objects.get(pk=hinted.pk).state == "queued"
    Action.objects.filter(pk=hinted.pk).update(setup_hint_s=None)
    assert schedule_round().placed == 1  # told nothing, it goes cold where there is room
    assert Action.objects.get(pk=hinted.pk).node.name == "elsewhere"


@pytest.mark.parametrize(("other_used_s_ago", "placed"), [(1000.0, 1), (10.0, 0)])
def test_a_long_wait_evicts_a_key_nobody_has_used_lately(settings, other_used_s_ago, placed):
    """As above, but the action has waited 200 s, past its 30 s setup: the other
    node's one key may go if no action started with it during a quarter of that."""
    settings.TANGRAM_POLICY = "tangram"
    now = timezone.now()
    holder = NodeFactory(
        name="holder", capacity={"cpu": 1, "memory": 8192}, warm=["m:x"], warm_slots=1
    )
    ActionFactory(state="running", node=holder, allocation={"cpu": 1})
    NodeFactory(name="elsewhere", capacity={"cpu": 4, "memory": 8192}, warm=["m:y"], warm_slots=1)
    WarmKeyUse.objects.create(key="m:y", used_at=now - timedelta(seconds=other_used_s_ago))
    ActionFactory(
        demand={"cpu": 1},
        affinity=["m:x"],
        setup_hint_s=30.0,
        submitted_at=now - timedelta(seconds=200),
    )
    assert schedule_round().placed == placed


def test_a_node_setting_a_key_up_for_a_placed_action_gets_no_more_of_its_actions(settings):
    """An action told of its 30 s setup was placed 10 s ago on the tighter node, whose
    agent has not reported the key yet: the node is setting it up, so the next
    action of that key sets it up where a slot is free rather than wait there on
    its core. Once the setup's 30 s have passed, or the agent reports the key, the
    node is no longer setting it up."""
    settings.TANGRAM_POLICY = "tangram"
    loading = NodeFactory(name="loading", capacity={"cpu": 3, "memory": 8192}, warm_slots=2)
    NodeFactory(name="spare", capacity={"cpu": 4, "memory": 8192}, warm_slots=2)
    hinted = {"affinity": ["m:x"], "setup_hint_s": 30.0}
    placed_at = timezone.now() - timedelta(seconds=10)
    running = ActionFactory(
        state="running", node=loading, allocation={"cpu": 1}, assigned_at=placed_at, **hinted
    )
    ActionFactory(demand={"cpu": 1}, **hinted)
    (node,) = scheduling_snapshot().nodes[:1]
    assert (node.id, node.warm, node.setting_up) == (str(loading.pk), {"m:x"}, {"m:x"})
    assert scheduling_snapshot().warm_nodes == {"m:x": 1}
    Action.objects.filter(pk=running.pk).update(assigned_at=placed_at - timedelta(seconds=25))
    assert not scheduling_snapshot().nodes[0].setting_up  # its 30 s have passed
    Action.objects.filter(pk=running.pk).update(assigned_at=placed_at)
    assert schedule_round().placed == 1
    assert Action.objects.get(state="assigned").node.name == "spare"
    Action.objects.filter(state="assigned").update(state="succeeded")
    loading.warm = ["m:x"]
    loading.save(update_fields=["warm"])
    ActionFactory(demand={"cpu": 1}, **hinted)
    assert schedule_round().placed == 1
    assert Action.objects.get(state="assigned").node.name == "loading"


def test_a_round_stamps_the_warm_keys_it_placed_as_used():
    NodeFactory()
    action = ActionFactory(demand={"cpu": 1}, affinity=["image:a", "model:b"])
    assert schedule_round().placed == 1
    action.refresh_from_db()
    used = dict(WarmKeyUse.objects.values_list("key", "used_at"))
    assert used == {"image:a": action.assigned_at, "model:b": action.assigned_at}


def test_a_round_hands_each_types_load_on_to_the_next():
    """What a type holds and has queued reaches the policy with its mean held
    lately, averaged from what the latest round saw it hold (``ActionLoadStat``),
    and a type that holds, asks and held nothing lately is forgotten."""
    NodeFactory(capacity={"cpu": 8, "memory": 100_000})
    tenant = TenantFactory()
    ActionFactory.create_batch(3, tenant=tenant, demand={"cpu": 2})
    key = (str(tenant.id), "sleep")
    first = scheduling_snapshot().type_loads[key]
    assert (first.kind, first.held, first.queued, first.mean_held) == ("cpu", 0.0, 6.0, 0.0)
    assert schedule_round().placed == 3
    schedule_round()  # sees the 6 cores held
    row = ActionLoadStat.objects.get(tenant=tenant, type="sleep")
    assert (row.kind, row.held, row.mean_held) == ("cpu", 6.0, 0.0)
    window_ago = row.updated_at - timedelta(seconds=LOAD_WINDOW_S)
    ActionLoadStat.objects.filter(pk=row.pk).update(updated_at=window_ago)
    later = scheduling_snapshot().type_loads[key]
    assert (later.held, later.queued) == (6.0, 0.0)
    assert later.mean_held == pytest.approx(6.0 * (1 - math.exp(-1)), rel=1e-3)
    Action.objects.update(state="succeeded")
    ActionLoadStat.objects.update(held=0.0, mean_held=0.0)
    schedule_round()
    assert not ActionLoadStat.objects.exists()


def test_a_types_load_names_its_job_also_while_the_type_is_away():
    """A type's load carries the job its actions are of, kept in ``ActionLoadStat``
    for the rounds where none of them runs or waits; "" while several jobs'."""
    NodeFactory(capacity={"cpu": 8, "memory": 100_000})
    tenant = TenantFactory()
    ActionFactory.create_batch(2, tenant=tenant, job="run-a", demand={"cpu": 1})
    key = (str(tenant.id), "sleep")
    assert scheduling_snapshot().type_loads[key].job == "run-a"
    assert schedule_round().placed == 2
    schedule_round()  # notes the type held by run-a
    assert ActionLoadStat.objects.get(tenant=tenant, type="sleep").job == "run-a"
    Action.objects.update(state="succeeded")
    away = scheduling_snapshot().type_loads[key]
    assert (away.held, away.queued, away.job) == (0.0, 0.0, "run-a")
    ActionFactory(tenant=tenant, job="run-b", demand={"cpu": 1})
    assert scheduling_snapshot().type_loads[key].job == "run-b"
    ActionFactory(tenant=tenant, job="run-a", demand={"cpu": 1})
    assert scheduling_snapshot().type_loads[key].job == ""


def test_a_type_never_seen_is_probed_once_while_its_probe_runs():
    """Calls of a type known to take 3 s queue before two of a type never run: the
    first of those goes ahead of them (the policy's probe), and the next round,
    seeing it placed, orders the second by the cold-start prior, behind the calls."""
    NodeFactory(capacity={"cpu": 1, "memory": 8192})
    tenant = TenantFactory()
    ActionDurationStat.objects.create(tenant=tenant, type="sleep", count=20, mean_s=3.0)
    now = timezone.now()
    calls = [
        ActionFactory(tenant=tenant, submitted_at=now - timedelta(seconds=10 - i)) for i in (0, 1)
    ]
    probes = [
        ActionFactory(
            tenant=tenant, type="sandbox.bash", submitted_at=now - timedelta(seconds=5 - i)
        )
        for i in (0, 1)
    ]
    assert schedule_round().placed == 1
    assert set(Action.objects.exclude(state="queued").values_list("id", flat=True)) == {
        probes[0].id
    }
    NodeFactory(capacity={"cpu": 1, "memory": 8192})
    assert schedule_round().placed == 1
    assert set(Action.objects.exclude(state="queued").values_list("id", flat=True)) == {
        probes[0].id,
        calls[0].id,
    }


def test_a_large_round_writes_every_placement_as_decided(settings):
    """More placements than one UPDATE writes: each lands with its node, allocation, units."""
    settings.TANGRAM_POLICY = "tangram"
    for name in ("a", "b", "c"):
        NodeFactory(name=name, capacity={"cpu": 2000, "memory": 1_000_000})
    tenant = TenantFactory()
    elastic = {"min_units": 1, "max_units": 2, "parallel_fraction": 0.95, "unit_kind": "cpu"}
    Action.objects.bulk_create(
        ActionFactory.build(
            tenant=tenant, demand={"cpu": 1, "memory": 16}, elasticity=elastic if i % 2 else {}
        )
        for i in range(WRITE_CHUNK * 2 + 500)
    )
    decision = get_policy("tangram").decide(scheduling_snapshot())
    assert len(decision.placements) == WRITE_CHUNK * 2 + 500

    assert schedule_round().placed == len(decision.placements)
    written = {
        str(pk): (str(node_id), allocation, units)
        for pk, node_id, allocation, units in Action.objects.filter(state="assigned").values_list(
            "pk", "node_id", "allocation", "units"
        )
    }
    assert written == {
        p.action_id: (p.node_id, dict(p.allocation), p.units) for p in decision.placements
    }
    assert {units for _, _, units in written.values()} == {1, 2}  # rigid and widened rows
    assert ActionEvent.objects.filter(state="assigned").count() == len(written)


def test_a_placement_of_an_action_cancelled_since_the_snapshot_is_not_written():
    node = NodeFactory()
    kept, cancelled = ActionFactory.create_batch(2, demand={"cpu": 1})
    Action.objects.filter(pk=cancelled.pk).update(state="cancelled")
    placements = [
        Placement(str(a.pk), str(node.pk), {"cpu": 2.0}, units=2) for a in (cancelled, kept)
    ]
    from django.utils import timezone

    assigned = _assign(placements, timezone.now())
    assert [a.pk for a in assigned] == [kept.pk]
    kept.refresh_from_db()
    cancelled.refresh_from_db()
    assert (kept.state, kept.node, kept.units) == ("assigned", node, 2)
    assert kept.allocation == {"cpu": 2.0}
    assert (cancelled.state, cancelled.node, cancelled.units) == ("cancelled", None, 1)


def test_the_snapshot_hands_the_policy_only_nodes_that_could_take_a_queued_action():
    full = NodeFactory(name="full", capacity={"cpu": 2, "memory": 100})
    no_cores = NodeFactory(name="no-cores", capacity={"cpu": 1, "memory": 100})
    roomy = NodeFactory(name="roomy", capacity={"cpu": 4, "memory": 100})
    NodeFactory(name="other-type", executors=["reward.model"])
    NodeFactory(name="gone", capacity={"cpu": 64, "memory": 100}, state="offline")
    a, b = TenantFactory(name="a"), TenantFactory(name="b")
    for tenant, node, allocation in (
        (a, full, {"cpu": 1, "memory": 50}),
        (b, full, {"cpu": 1, "memory": 50}),
        (b, no_cores, {"cpu": 1, "memory": 10}),
        (a, roomy, {"cpu": 3, "memory": 10}),
    ):
        ActionFactory(tenant=tenant, state="running", node=node, allocation=allocation)
    ActionFactory.create_batch(3, tenant=b, demand={"cpu": 1, "memory": 16})

    snapshot = scheduling_snapshot()
    assert [(n.id, dict(n.capacity)) for n in snapshot.nodes] == [
        (str(roomy.pk), {"cpu": 1.0, "memory": 90.0})
    ]
    assert {r.tenant: dict(r.allocation) for r in snapshot.running} == {
        str(a.pk): {"cpu": 4.0, "memory": 60.0},
        str(b.pk): {"cpu": 2.0, "memory": 60.0},
    }
    assert snapshot.capacity == {"cpu": 11.0, "memory": 8492.0}  # online nodes only
    assert len(snapshot.pending) == 3
    assert len({id(p.demand) for p in snapshot.pending}) == 1  # decoded once, shared


def test_a_round_with_no_room_anywhere_does_not_read_the_queue(django_assert_max_num_queries):
    node = NodeFactory(capacity={"cpu": 1, "memory": 100})
    ActionFactory(state="running", node=node, allocation={"cpu": 1, "memory": 100})
    ActionFactory.create_batch(5, demand={"cpu": 1})
    # Lock, nodes, usage, queued demands, grown elastic actions, what each type
    # holds (placed rows, grouped) and held lately (read, kept), ...: never the queue's rows.
    with django_assert_max_num_queries(12):
        report = schedule_round()
    assert (report.pending, report.placed) == (0, 0)
    Action.objects.filter(state="running").update(state="succeeded")
    assert schedule_round().placed == 1


def test_a_round_takes_cores_back_from_several_grown_actions(settings):
    """Four cores wanted, none free: two actions grown to 4 units give two each."""
    settings.TANGRAM_POLICY = "tangram"
    node = NodeFactory(capacity={"cpu": 8, "memory": 100_000}, protocol=3)
    elasticity = {"min_units": 1, "max_units": 8, "parallel_fraction": 0.9, "unit_kind": "cpu"}
    grown = [
        ActionFactory(
            state="running",
            node=node,
            demand={"cpu": 1, "memory": 16},
            elasticity=elasticity,
            allocation={"cpu": 4, "memory": 16},
            units=4,
        )
        for _ in range(2)
    ]
    rigid = ActionFactory(demand={"cpu": 4, "memory": 16}, duration_hint_s=5)
    assert schedule_round().placed == 1
    for action in grown:
        action.refresh_from_db()
        assert (action.units, action.allocation) == (2, {"cpu": 2, "memory": 16})
    rigid.refresh_from_db()
    assert (rigid.state, rigid.node) == ("assigned", node)
    assert placed_usage().by_node[node.id]["cpu"] == 8


def test_a_types_load_carries_its_whole_demand_also_while_the_type_is_away():
    """The room kept for a type covers its memory beside its cores, so its load
    carries one action's whole demand, kept in ``ActionLoadStat`` for the rounds
    where none of its actions runs or waits."""
    NodeFactory(capacity={"cpu": 8, "memory": 100_000})
    tenant = TenantFactory()
    ActionFactory.create_batch(2, tenant=tenant, demand={"cpu": 1, "memory": 2048})
    key = (str(tenant.id), "sleep")
    assert scheduling_snapshot().type_loads[key].demand == {"cpu": 1, "memory": 2048}
    assert schedule_round().placed == 2
    schedule_round()  # notes the type's demand
    row = ActionLoadStat.objects.get(tenant=tenant, type="sleep")
    assert row.demand == {"cpu": 1, "memory": 2048}
    Action.objects.update(state="succeeded")
    away = scheduling_snapshot().type_loads[key]
    assert (away.held, away.queued, away.demand) == (0.0, 0.0, {"cpu": 1, "memory": 2048})
