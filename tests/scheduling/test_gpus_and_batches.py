"""The live round with GPU topology and reward batches: what it commits, on Postgres."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.actions.models import Action, ActionBatchStat, ActionDurationStat
from apps.inventory.models import Node
from apps.inventory.services import assignment_of, nodes_reap_lost
from apps.scheduling.selectors import scheduling_snapshot, waiting_reasons
from apps.scheduling.services import schedule_round
from tests.factories import ActionFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db

TWO_GROUPS = [["0", "1", "2", "3"], ["4", "5", "6", "7"]]


@pytest.fixture(autouse=True)
def tangram_policy(settings):
    settings.TANGRAM_POLICY = "tangram"


def gpu_node(groups: list[list[str]], name: str = "gpu-node", **capacity: float) -> Node:
    count = sum(len(group) for group in groups)
    return NodeFactory(
        name=name,
        capacity={"cpu": 32, "memory": 100_000, "gpu": count, **capacity},
        gpu_groups=groups,
    )


def gpu_action(count: int, **fields: object) -> Action:
    return ActionFactory(demand={"cpu": 1, "memory": 16, "gpu": count}, **fields)


def seen_alone(tenant: object, type: str = "sleep") -> None:
    """One of the type has run alone: the batches that follow can be measured."""
    ActionDurationStat.objects.create(tenant=tenant, type=type, count=1, mean_s=1.0)


def group_of(gpus: list[str], groups: list[list[str]]) -> int:
    """The one group holding every id of ``gpus`` (fails if they straddle groups)."""
    (found,) = {i for i, group in enumerate(groups) for gpu in gpus if gpu in group}
    return found


def test_a_multi_gpu_action_gets_its_ids_inside_one_group():
    node = gpu_node(TWO_GROUPS)
    action = gpu_action(2)
    schedule_round()
    action.refresh_from_db()
    assert (action.state, action.node) == ("assigned", node)
    assert len(action.gpus) == 2 and len(set(action.gpus)) == 2
    group_of(action.gpus, TWO_GROUPS)
    assert action.allocation["gpu"] == 2
    assert assignment_of(action)["gpus"] == action.gpus


def test_a_group_a_running_action_holds_part_of_is_skipped_for_a_2_gpu_action():
    groups = [["0", "1"], ["2", "3"]]
    node = gpu_node(groups)
    gpu_action(1, state="running", node=node, allocation={"gpu": 1}, gpus=["0"])
    action = gpu_action(2)
    schedule_round()
    action.refresh_from_db()
    assert action.state == "assigned"
    assert sorted(action.gpus) == ["2", "3"]


def test_an_action_larger_than_every_group_spans_groups_and_a_smaller_one_waits_for_one():
    """One GPU free in each 2-GPU group: 2 GPUs wait for a whole group, 3 can never fit one."""
    groups = [["0", "1"], ["2", "3"], ["4", "5"]]
    node = gpu_node(groups)
    gpu_action(1, state="running", node=node, allocation={"gpu": 1}, gpus=["0"])
    gpu_action(1, state="running", node=node, allocation={"gpu": 1}, gpus=["2"])
    gpu_action(1, state="running", node=node, allocation={"gpu": 1}, gpus=["4"])
    pair = gpu_action(2, priority=1)  # first in line: no group has two free
    three = gpu_action(3)
    schedule_round()
    pair.refresh_from_db()
    three.refresh_from_db()
    assert pair.state == "queued"
    assert three.state == "assigned"
    assert sorted(three.gpus) == ["1", "3", "5"]


def test_an_action_that_may_split_its_gpus_takes_one_of_each_group(settings):
    """One GPU free in each group: a 2-GPU action waits for a group, and says so,
    unless its client said it runs as well across groups (``may_split_gpus``)."""
    groups = [["0", "1"], ["2", "3"]]
    node = gpu_node(groups)
    gpu_action(1, state="running", node=node, allocation={"gpu": 1}, gpus=["0"])
    gpu_action(1, state="running", node=node, allocation={"gpu": 1}, gpus=["2"])
    pair = gpu_action(2, priority=1)
    schedule_round()
    pair.refresh_from_db()
    assert pair.state == "queued"
    assert waiting_reasons(actions=[pair])[pair.id].startswith(
        "no NVLink group has 2 GPUs free: the node(s) with 1 cpu, 2 gpu, 16 memory free have "
        "them only across groups"
    )
    settings.TANGRAM_POLICY = "fifo"  # which takes the first free ids, whatever their group
    assert waiting_reasons(actions=[pair])[pair.id].startswith("room is free now")
    settings.TANGRAM_POLICY = "tangram"
    Action.objects.filter(pk=pair.pk).update(may_split_gpus=True)
    pair.refresh_from_db()
    assert waiting_reasons(actions=[pair])[pair.id].startswith("room is free now")
    schedule_round()
    pair.refresh_from_db()
    assert (pair.state, sorted(pair.gpus)) == ("assigned", ["1", "3"])


def test_a_run_that_may_shrink_its_gpus_borrows_extra_ones_only_where_they_come_back():
    """Every GPU is another tenant's idle guarantee: a sweep that may give GPUs back
    grows into them, as lent cores do, but only while every online GPU node's agent
    can take them back (protocol 6)."""
    from apps.tenants.services import quota_set
    from tangram_agent.protocol import GPU_RESIZE_PROTOCOL

    node = gpu_node([["0", "1", "2", "3"]])
    Node.objects.filter(pk=node.pk).update(protocol=GPU_RESIZE_PROTOCOL)
    owner, sweeper = TenantFactory(), TenantFactory()
    quota_set(tenant=owner, resource="gpu", guaranteed=4, limit=4)
    quota_set(tenant=sweeper, resource="gpu", guaranteed=0, limit=4)
    elastic = {"min_units": 1, "max_units": 4, "parallel_fraction": 0.95, "unit_kind": "gpu"}

    def sweep() -> Action:
        action = gpu_action(
            1, tenant=sweeper, elasticity=elastic, duration_hint_s=600, may_shrink_gpus=True
        )
        schedule_round()
        action.refresh_from_db()
        return action

    assert sweep().units > 1
    Action.objects.update(state="succeeded")
    NodeFactory(name="old-gpu-node", capacity={"gpu": 1}, gpu_groups=[["0"]], protocol=5)
    assert sweep().units == 1


def test_a_running_actions_gpus_are_not_handed_out_until_it_finishes():
    groups = [["0", "1", "2", "3"]]
    gpu_node(groups)
    first = gpu_action(3)
    schedule_round()
    first.refresh_from_db()
    Action.objects.filter(pk=first.pk).update(state="running")
    wide, narrow = gpu_action(2), gpu_action(1)
    schedule_round()
    wide.refresh_from_db()
    narrow.refresh_from_db()
    assert wide.state == "queued"  # one GPU is left, and it goes to the 1-GPU action
    assert narrow.state == "assigned"
    (left,) = set(groups[0]) - set(first.gpus)
    assert narrow.gpus == [left]

    Action.objects.filter(pk=first.pk).update(state="succeeded")
    schedule_round()
    wide.refresh_from_db()
    assert wide.state == "assigned"
    assert set(wide.gpus) <= set(first.gpus) and len(wide.gpus) == 2


def test_the_snapshot_gives_each_node_its_free_gpu_groups_in_place():
    node = gpu_node([["0", "1"], ["2", "3"]])
    gpu_action(1, state="assigned", node=node, allocation={"gpu": 1}, gpus=["1"])
    gpu_action(2, state="running", node=node, allocation={"gpu": 2}, gpus=["2", "3"])
    gpu_action(1, state="succeeded", node=node, allocation={"gpu": 1}, gpus=["0"])
    gpu_action(1)
    (seen,) = scheduling_snapshot().nodes
    assert seen.gpu_groups == (("0",), ())
    assert seen.capacity["gpu"] == 1


def test_a_requeued_action_gives_its_gpus_and_batch_back(settings):
    node = gpu_node([["0", "1"]])
    action = gpu_action(2)
    schedule_round()
    Action.objects.filter(pk=action.pk).update(batch_id="batch:x", batch_size=3)
    Node.objects.filter(pk=node.pk).update(
        last_seen_at=timezone.now() - timedelta(seconds=settings.TANGRAM_LEASE_S + 1)
    )
    assert nodes_reap_lost() == 1
    action.refresh_from_db()
    assert (action.state, action.node, action.gpus, action.batch_id, action.batch_size) == (
        "queued",
        None,
        [],
        "",
        1,
    )


def test_actions_with_one_batch_key_beyond_the_free_slots_share_a_batch_and_a_node():
    node = NodeFactory(capacity={"cpu": 1, "memory": 1000})
    NodeFactory(name="busy", capacity={"cpu": 1, "memory": 1000})
    tenant = TenantFactory()
    seen_alone(tenant)
    ActionFactory(state="running", node=Node.objects.get(name="busy"), allocation={"cpu": 1})
    members = ActionFactory.create_batch(
        4, tenant=tenant, demand={"cpu": 1, "memory": 100}, batch_key="rm-7b", batch_limit=8
    )
    assert schedule_round().placed == 4
    placed = Action.objects.filter(pk__in=[m.pk for m in members])
    assert {(a.state, a.node_id) for a in placed} == {("assigned", node.pk)}
    (batch_id,) = {a.batch_id for a in placed}
    assert batch_id
    assert [a.allocation for a in placed] == [{"cpu": 0.25, "memory": 25.0}] * 4
    assert {(assignment_of(a)["batch_id"], assignment_of(a)["batch_size"]) for a in placed} == {
        (batch_id, 4)
    }


def test_where_batching_has_cost_too_much_the_round_runs_members_one_at_a_time():
    """A marginal of 0.9 over 50 batches (ActionBatchStat): four calls on one free slot
    run one at a time, ending after 2.5 runs on average, not all after ~3.6."""
    NodeFactory(capacity={"cpu": 1, "memory": 1000})
    tenant = TenantFactory()
    ActionBatchStat.objects.create(tenant=tenant, type="sleep", count=50, marginal=0.9)
    members = ActionFactory.create_batch(
        4, tenant=tenant, demand={"cpu": 1, "memory": 100}, batch_key="rm", batch_limit=8
    )
    assert schedule_round().placed == 1
    placed = Action.objects.filter(pk__in=[m.pk for m in members], state="assigned")
    assert [(a.batch_id, a.batch_size) for a in placed] == [("", 1)]


def test_the_first_of_a_type_never_run_alone_runs_alone_so_that_batches_can_be_measured():
    """Four calls on one free slot, nothing of the type seen alone: one runs alone now."""
    NodeFactory(capacity={"cpu": 1, "memory": 1000})
    members = ActionFactory.create_batch(
        4, tenant=TenantFactory(), demand={"cpu": 1, "memory": 100}, batch_key="rm", batch_limit=8
    )
    assert schedule_round().placed == 1
    (first,) = Action.objects.filter(pk__in=[m.pk for m in members], state="assigned")
    assert (first.pk, first.batch_id, first.batch_size) == (members[0].pk, "", 1)


def test_batches_split_over_the_free_slots_each_on_one_node():
    nodes = [NodeFactory(capacity={"cpu": 1, "memory": 1000}) for _ in range(2)]
    tenant = TenantFactory()
    seen_alone(tenant)
    members = ActionFactory.create_batch(
        4, tenant=tenant, demand={"cpu": 1, "memory": 100}, batch_key="rm", batch_limit=2
    )
    assert schedule_round().placed == 4
    by_batch: dict[str, set[object]] = {}
    for action in Action.objects.filter(pk__in=[m.pk for m in members]):
        by_batch.setdefault(action.batch_id, set()).add(action.node_id)
        assert action.allocation == {"cpu": 0.5, "memory": 50.0}
        assert action.batch_size == 2
    assert sorted(by_batch.values(), key=str) == sorted(({n.pk} for n in nodes), key=str)


def test_a_gpu_batch_shares_its_gpus_and_holds_them_for_the_next_round():
    node = gpu_node([["0"], ["1"]])
    gpu_action(1, state="running", node=node, allocation={"gpu": 1}, gpus=["1"])
    tenant = TenantFactory()
    seen_alone(tenant)
    members = [gpu_action(1, tenant=tenant, batch_key="rm", batch_limit=4) for _ in range(3)]
    assert schedule_round().placed == 3
    placed = list(Action.objects.filter(pk__in=[m.pk for m in members]))
    assert {(a.node_id, tuple(a.gpus)) for a in placed} == {(node.pk, ("0",))}
    assert len({a.batch_id for a in placed}) == 1
    assert sum(a.allocation["gpu"] for a in placed) == pytest.approx(1)
    later = gpu_action(1)
    schedule_round()
    later.refresh_from_db()
    assert later.state == "queued"  # both GPUs are held: one by the batch, one by the runner


def test_an_action_without_a_batch_key_is_never_batched():
    NodeFactory(capacity={"cpu": 1, "memory": 1000})
    ActionFactory.create_batch(3, tenant=TenantFactory(), demand={"cpu": 1, "memory": 100})
    assert schedule_round().placed == 1
    assert list(Action.objects.filter(state="assigned").values_list("batch_id", flat=True)) == [""]
