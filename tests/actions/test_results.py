"""Results are recorded exactly once, and only for the attempt that holds the action."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from apps.actions.models import Action, ActionEvent
from apps.actions.services import action_mark_started, action_record_result
from apps.scheduling.services import schedule_round
from tests.factories import ActionFactory, NodeFactory

pytestmark = pytest.mark.django_db


def _result(action: Action, **overrides):
    now = time.time()
    return {
        "type": "result",
        "action": str(action.pk),
        "attempt": action.attempt,
        "state": "succeeded",
        "exit_code": 0,
        "stdout": "hello\n",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "error": "",
        "started_at": now - 0.5,
        "finished_at": now,
        **overrides,
    }


def _placed(tenant=None) -> Action:
    node = NodeFactory()
    action = ActionFactory(**({"tenant": tenant} if tenant else {}))
    schedule_round()
    action.refresh_from_db()
    assert action.node == node
    return action


def test_result_is_recorded_once():
    action = _placed()
    assert action_mark_started(
        node_id=action.node_id, action_id=str(action.pk), attempt=1, started_at=time.time()
    )
    assert action_record_result(node_id=action.node_id, result=_result(action))
    assert not action_record_result(node_id=action.node_id, result=_result(action, stdout="2nd"))
    action.refresh_from_db()
    assert (action.state, action.stdout, action.exit_code) == ("succeeded", "hello\n", 0)
    assert action.act_s is not None and action.act_s >= 0
    assert ActionEvent.objects.filter(action=action, state="succeeded").count() == 1


def test_stale_attempt_and_other_node_are_ignored():
    action = _placed()
    assert not action_record_result(node_id=action.node_id, result=_result(action, attempt=7))
    other = NodeFactory()
    assert not action_record_result(node_id=other.pk, result=_result(action))
    action.refresh_from_db()
    assert action.state == "assigned"


def test_oversized_output_is_capped_and_flagged(settings):
    settings.TANGRAM_OUTPUT_CAP_BYTES = 10
    action = _placed()
    action_record_result(node_id=action.node_id, result=_result(action, stdout="x" * 100))
    action.refresh_from_db()
    assert action.stdout == "x" * 10 and action.stdout_truncated


@pytest.mark.django_db(transaction=True)
def test_long_poll_returns_when_the_result_lands(owner):
    action = _placed(tenant=owner.tenant)

    def finish_soon() -> None:
        time.sleep(0.5)
        action_record_result(node_id=action.node_id, result=_result(action))
        connection.close()

    threading.Thread(target=finish_soon).start()
    body = owner.client.get(f"/api/v1/actions/{action.pk}", {"wait": 30}).json()
    assert body["state"] == "succeeded" and body["stdout"] == "hello\n"


@pytest.mark.django_db(transaction=True)
def test_long_poll_times_out_with_current_state(owner):
    action = ActionFactory(tenant=owner.tenant)
    body = owner.client.get(f"/api/v1/actions/{action.pk}", {"wait": 0.3}).json()
    assert body["state"] == "queued"
    assert owner.client.get(f"/api/v1/actions/{action.pk}", {"wait": -1}).status_code == 400


def test_success_updates_the_duration_estimate_the_scheduler_reads():
    from apps.scheduling.selectors import scheduling_snapshot

    action = _placed()
    action_record_result(
        node_id=action.node_id, result=_result(action, started_at=1000.0, finished_at=1002.0)
    )
    stats = scheduling_snapshot().duration_stats
    assert stats[(str(action.tenant_id), action.type)].count == 1
    assert stats[(str(action.tenant_id), action.type)].mean_s == pytest.approx(2.0)


def test_a_batch_teaches_the_scheduler_what_batching_costs_once_all_members_succeed():
    """Against the runs seen alone (2 s): three members in 4.4 s cost 0.6 of a run each
    past the first. Their own durations are the batch's, so the estimate keeps to 2 s."""
    from apps.scheduling.selectors import scheduling_snapshot

    single = _placed()
    action_record_result(
        node_id=single.node_id, result=_result(single, started_at=1000.0, finished_at=1002.0)
    )
    key = (str(single.tenant_id), single.type)
    # The scheduler reads what batching costs while an action that may be batched waits.
    ActionFactory(tenant=single.tenant, batch_key="rm", batch_limit=4)
    members = [
        ActionFactory(
            tenant=single.tenant,
            node=single.node,
            state="running",
            batch_id="batch:m0",
            batch_size=3,
        )
        for _ in range(3)
    ]
    for index, member in enumerate(members):
        assert key not in scheduling_snapshot().batch_stats  # not before the last one
        action_record_result(
            node_id=member.node_id,
            result=_result(member, started_at=1010.0 + index * 0.1, finished_at=1014.4),
        )
    snapshot = scheduling_snapshot()
    assert snapshot.batch_stats[key].count == 1
    assert snapshot.batch_stats[key].marginal == pytest.approx((4.4 / 2.0 - 1.0) / 2)
    assert snapshot.duration_stats[key].count == 1
    assert snapshot.duration_stats[key].mean_s == pytest.approx(2.0)


def test_a_result_that_overtakes_started_fills_started_at_once():
    action = _placed()
    assert action_record_result(
        node_id=action.node_id, result=_result(action, started_at=1000.0, finished_at=1002.0)
    )
    action.refresh_from_db()
    assert action.started_at.timestamp() == 1000.0
