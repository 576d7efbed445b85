"""The agent websocket, driven with Channels' communicator against real Postgres and Redis."""

from __future__ import annotations

import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from apps.actions.models import Action, ActionEvent
from apps.inventory.models import Node
from apps.inventory.services import agent_token_issue
from apps.scheduling.services import schedule_round
from tangram_agent.protocol import (
    GPU_RESIZE_PROTOCOL,
    PROTOCOL_VERSION,
    RESIZE_PROTOCOL,
    scorer_warm_key,
)
from tangram_web.asgi import application
from tests.factories import ActionFactory, succeeded_result

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def _register(name: str = "node-x", running=None) -> dict:
    return {
        "type": "register",
        "protocol": PROTOCOL_VERSION,
        "node": name,
        "capacity": {"cpu": 2, "memory": 2048},
        "executors": ["sleep", "sandbox.python"],
        "warm": [],
        "labels": {},
        "running": running or [],
    }


async def _connect(token: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    connected, _ = await communicator.connect()
    assert connected
    return communicator


@pytest.fixture
def agent_token() -> str:
    return agent_token_issue(name="test")[1]


async def test_wrong_token_is_refused(agent_token):
    communicator = WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", b"Bearer nope-nope-nope")]
    )
    connected, code = await communicator.connect()
    assert not connected and code == 4401


async def test_first_message_must_be_register(agent_token):
    communicator = await _connect(agent_token)
    await communicator.send_json_to({"type": "heartbeat", "running": []})
    reply = await communicator.receive_json_from()
    assert reply["type"] == "error"
    await communicator.disconnect()


async def test_register_assign_started_result_ack(agent_token):
    communicator = await _connect(agent_token)
    await communicator.send_json_to(_register())
    registered = await communicator.receive_json_from()
    assert registered["type"] == "registered" and registered["lease_s"] > 0
    action = await database_sync_to_async(ActionFactory)(demand={"cpu": 1})
    assert (await database_sync_to_async(schedule_round)()).placed == 1
    assign = await communicator.receive_json_from(timeout=5)
    assert assign["type"] == "assign" and assign["action"]["id"] == str(action.pk)
    assert assign["action"]["allocation"] == {"cpu": 1}
    assert assign["action"]["tenant"] == str(action.tenant_id)

    now = time.time()
    await communicator.send_json_to(
        {"type": "started", "action": str(action.pk), "attempt": 1, "started_at": now}
    )
    result = {
        "type": "result",
        "action": str(action.pk),
        "attempt": 1,
        "state": "succeeded",
        "exit_code": 0,
        "stdout": "ok",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "error": "",
        "started_at": now,
        "finished_at": now + 0.1,
    }
    await communicator.send_json_to(result)
    assert await communicator.receive_json_from() == {
        "type": "ack",
        "action": str(action.pk),
        "attempt": 1,
    }
    # A re-sent result (the ack was lost) is acknowledged again and recorded once.
    await communicator.send_json_to({**result, "stdout": "second copy"})
    assert (await communicator.receive_json_from())["type"] == "ack"
    await communicator.disconnect()

    stored = await database_sync_to_async(Action.objects.get)(pk=action.pk)
    assert (stored.state, stored.stdout) == ("succeeded", "ok")
    events = await database_sync_to_async(
        lambda: list(ActionEvent.objects.filter(action=action).values_list("state", flat=True))
    )()
    assert sorted(events) == ["assigned", "running", "succeeded"]


async def test_reconnect_resends_assignments_and_requeues_lost_runs(agent_token):
    communicator = await _connect(agent_token)
    await communicator.send_json_to(_register())
    await communicator.receive_json_from()
    kept, lost = await database_sync_to_async(lambda: [ActionFactory(), ActionFactory()])()
    await database_sync_to_async(schedule_round)()
    await communicator.receive_json_from(timeout=5)
    await communicator.receive_json_from(timeout=5)
    await database_sync_to_async(
        lambda: Action.objects.filter(pk=lost.pk).update(state="running")
    )()
    await communicator.disconnect()

    # The agent restarted: it holds nothing. The assigned action is sent again,
    # the running one it lost goes back to the queue with a new attempt.
    communicator = await _connect(agent_token)
    await communicator.send_json_to(_register())
    assert (await communicator.receive_json_from())["type"] == "registered"
    resent = await communicator.receive_json_from(timeout=5)
    assert resent["type"] == "assign" and resent["action"]["id"] == str(kept.pk)
    lost_now = await database_sync_to_async(Action.objects.get)(pk=lost.pk)
    assert (lost_now.state, lost_now.attempt) == ("queued", 2)
    await communicator.disconnect()


async def test_heartbeat_cancels_runs_that_are_no_longer_the_nodes(agent_token):
    communicator = await _connect(agent_token)
    await communicator.send_json_to(_register())
    await communicator.receive_json_from()
    action = await database_sync_to_async(ActionFactory)(state="cancelled")
    await communicator.send_json_to(
        {"type": "heartbeat", "running": [{"action": str(action.pk), "attempt": 1}]}
    )
    assert await communicator.receive_json_from(timeout=5) == {
        "type": "cancel",
        "action": str(action.pk),
        "attempt": 1,
    }
    node = await database_sync_to_async(Node.objects.get)(name="node-x")
    assert node.state == "online"
    await communicator.disconnect()


async def _refused(agent_token: str, message: dict) -> str:
    """The error the server answers ``message`` with (it then closes the socket)."""
    communicator = await _connect(agent_token)
    await communicator.send_json_to(message)
    reply = await communicator.receive_json_from()
    assert reply["type"] == "error", reply
    assert (await communicator.receive_output())["type"] == "websocket.close"
    await communicator.disconnect()
    return reply["message"]


async def test_a_result_with_nul_in_its_output_is_stored_with_them_replaced(agent_token):
    """PostgreSQL text holds no NUL: a program that prints one still gets its result."""
    communicator = await _connect(agent_token)
    await communicator.send_json_to(_register())
    assert (await communicator.receive_json_from())["type"] == "registered"
    action = await database_sync_to_async(ActionFactory)(demand={"cpu": 1})
    assert (await database_sync_to_async(schedule_round)()).placed == 1
    assert (await communicator.receive_json_from(timeout=5))["type"] == "assign"
    now = time.time()
    result = succeeded_result(action.pk, 1, started_at=now, finished_at=now + 0.1)
    await communicator.send_json_to(
        {**result, "stdout": "a\x00b", "stderr": "\x00", "error": "e\x00"}
    )
    assert (await communicator.receive_json_from())["type"] == "ack"
    await communicator.disconnect()
    stored = await database_sync_to_async(Action.objects.get)(pk=action.pk)
    assert (stored.state, stored.stdout, stored.stderr) == ("succeeded", "a\ufffdb", "\ufffd")
    assert stored.error == "e\ufffd"


NOW = 1.7e9
SOME_ID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"


def _result(**changes) -> dict:
    return {**succeeded_result(SOME_ID, 1, started_at=NOW, finished_at=NOW), **changes}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (_result(action="not-a-uuid"), "action"),
        (_result(attempt=10**30), "attempt"),
        (_result(state="exploded"), "state"),
        (_result(exit_code=10**20), "exit_code"),
        (_result(stdout=["x"]), "stdout"),
        (_result(finished_at=1e300), "finished_at"),
        (_result(started_at=-1), "started_at"),
        ({"type": "started", "action": "zz", "attempt": 1, "started_at": NOW}, "action"),
        ({"type": "started", "action": SOME_ID, "attempt": 0, "started_at": NOW}, "attempt"),
        ({"type": "heartbeat", "running": [{"action": "x", "attempt": 1}]}, "running.0.action"),
        ({"type": "heartbeat", "running": "x"}, "running"),
    ],
)
async def test_a_malformed_message_is_refused_naming_its_field(agent_token, message, field):
    """Before any service stores it: an agent's bug gets a message, not a dropped socket."""
    communicator = await _connect(agent_token)
    await communicator.send_json_to(_register())
    assert (await communicator.receive_json_from())["type"] == "registered"
    await communicator.send_json_to(message)
    reply = await communicator.receive_json_from()
    assert reply["type"] == "error", reply
    assert reply["message"].startswith(f"malformed {message['type']} message: {field}: "), reply
    assert (await communicator.receive_output())["type"] == "websocket.close"
    await communicator.disconnect()


def _gpu_register(groups, gpu: float) -> dict:
    message = _register("gpu-node")
    message["capacity"] = {**message["capacity"], "gpu": gpu}
    message["gpu_groups"] = groups
    return message


@pytest.mark.parametrize(
    ("groups", "gpu", "complaint"),
    [
        ([["0", "1"], ["1", "2"]], 4, "'1' is listed twice"),
        ([["0", "1"], ["2", "3"]], 2, "list 4 GPU(s) but capacity gpu is 2"),
        ([], 2, "list 0 GPU(s) but capacity gpu is 2"),
        ([["0"], []], 1, "group 1 is empty"),
        ([["0", 1]], 2, "1 in group 0 is not a plain name"),
        ([["0", ""]], 2, "'' in group 0 is not a plain name"),
        (["0,1"], 2, "must be a list of lists"),
        ({"0": ["0"]}, 1, "must be a list of lists"),
    ],
)
async def test_a_register_with_bad_gpu_groups_is_refused(agent_token, groups, gpu, complaint):
    message = await _refused(agent_token, _gpu_register(groups, gpu))
    assert message.startswith("register refused: gpu_groups") and complaint in message, message
    assert not await database_sync_to_async(Node.objects.filter(name="gpu-node").exists)()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"labels": {"zone\x00": "a"}}, "labels"),
        ({"labels": {"zone": "a\x00"}}, "labels.zone"),
        ({"node": "n" * 129}, "node"),
        ({"capacity": {"cpu": -1}}, "capacity.cpu"),
        ({"executors": "sleep"}, "executors"),
        ({"running": [{"action": SOME_ID, "attempt": "first"}]}, "running.0.attempt"),
    ],
)
async def test_a_malformed_register_is_refused_naming_its_field(agent_token, change, field):
    message = await _refused(agent_token, {**_register(), **change})
    assert message.startswith(f"malformed register message: {field}: "), message
    assert not await database_sync_to_async(Node.objects.exists)()


async def test_a_register_with_an_unknown_protocol_is_refused(agent_token):
    message = await _refused(agent_token, {**_register(), "protocol": PROTOCOL_VERSION + 1})
    assert "protocol" in message
    assert not await database_sync_to_async(Node.objects.exists)()


async def test_a_protocol_1_agent_still_registers_without_gpus(agent_token):
    communicator = await _connect(agent_token)
    await communicator.send_json_to({**_register(), "protocol": 1})
    assert (await communicator.receive_json_from())["type"] == "registered"
    await communicator.disconnect()
    node = await database_sync_to_async(Node.objects.get)(name="node-x")
    assert node.gpu_groups == []


async def test_gpu_groups_are_stored_and_assignments_carry_gpus_and_batch(agent_token):
    communicator = await _connect(agent_token)
    await communicator.send_json_to(_gpu_register([["0", "1"], ["2", "3"]], 4))
    assert (await communicator.receive_json_from())["type"] == "registered"
    node = await database_sync_to_async(Node.objects.get)(name="gpu-node")
    assert node.gpu_groups == [["0", "1"], ["2", "3"]] and node.capacity["gpu"] == 4

    action = await database_sync_to_async(ActionFactory)(demand={"cpu": 1, "gpu": 2})
    assert (await database_sync_to_async(schedule_round)()).placed == 1
    assign = (await communicator.receive_json_from(timeout=5))["action"]
    assert assign["id"] == str(action.pk)
    assert sorted(assign["gpus"]) in (["0", "1"], ["2", "3"])
    assert assign["batch_id"] is None
    await communicator.disconnect()


@pytest.mark.parametrize("skew_s", [-120.0, 0.0, 300.0])
async def test_a_skewed_agents_times_are_put_on_the_servers_clock(agent_token, skew_s):
    """The agent's clock reads ``skew_s`` off; it says so in ``sent_at``. Times of a
    skewed agent are shifted; a clock within the tolerance is taken as it is."""
    communicator = await _connect(agent_token)
    await communicator.send_json_to({**_register(), "sent_at": time.time() + skew_s})
    assert (await communicator.receive_json_from())["type"] == "registered"
    await communicator.send_json_to(
        {"type": "heartbeat", "running": [], "sent_at": time.time() + skew_s}
    )
    action = await database_sync_to_async(ActionFactory)(demand={"cpu": 1})
    assert (await database_sync_to_async(schedule_round)()).placed == 1
    await communicator.receive_json_from(timeout=5)
    ran_at = time.time() - 30  # on the server's clock: started 30 s ago, ran 10 s
    agent_clock = ran_at + skew_s
    await communicator.send_json_to(
        {"type": "started", "action": str(action.pk), "attempt": 1, "started_at": agent_clock}
    )
    await communicator.send_json_to(
        succeeded_result(action.pk, 1, started_at=agent_clock, finished_at=agent_clock + 10)
    )
    assert (await communicator.receive_json_from())["type"] == "ack"
    await communicator.disconnect()

    stored = await database_sync_to_async(Action.objects.get)(pk=action.pk)
    assert stored.started_at.timestamp() == pytest.approx(ran_at, abs=0.5)
    assert stored.finished_at.timestamp() == pytest.approx(ran_at + 10, abs=0.5)
    if not skew_s:  # within the tolerance: exactly what the agent said
        assert stored.started_at.timestamp() == pytest.approx(agent_clock, abs=1e-3)


def _grown_elastic(node_name: str, units: int) -> Action:
    """A running elastic action that took one core per unit on an idle node."""
    return ActionFactory(
        node=Node.objects.get(name=node_name),
        state="running",
        demand={"cpu": 1, "memory": 16},
        elasticity={"min_units": 1, "max_units": 8, "parallel_fraction": 0.9, "unit_kind": "cpu"},
        allocation={"cpu": units, "memory": 16},
        units=units,
        duration_hint_s=60,
    )


@pytest.mark.parametrize("protocol", [PROTOCOL_VERSION, 3, 2])
async def test_a_round_takes_cores_back_from_a_grown_elastic_action(
    agent_token, settings, protocol
):
    """Agents get ``resize`` (protocol 3 and 4: ``shrink``) before the assignment that
    uses the cores; older agents' actions keep their units and the queued action waits."""
    settings.TANGRAM_POLICY = "tangram"
    communicator = await _connect(agent_token)
    await communicator.send_json_to({**_register(), "protocol": protocol})
    assert (await communicator.receive_json_from())["type"] == "registered"
    node = await database_sync_to_async(Node.objects.get)(name="node-x")
    assert node.protocol == protocol
    elastic = await database_sync_to_async(_grown_elastic)("node-x", 2)
    rigid = await database_sync_to_async(ActionFactory)(demand={"cpu": 1}, duration_hint_s=5)
    placed = (await database_sync_to_async(schedule_round)()).placed
    await database_sync_to_async(elastic.refresh_from_db)()
    if protocol < 3:
        assert placed == 0 and elastic.units == 2
        assert await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return
    assert placed == 1
    assert (elastic.units, elastic.allocation) == (1, {"cpu": 1, "memory": 16})
    resize = await communicator.receive_json_from(timeout=5)
    assert resize == {
        "type": "resize" if protocol >= RESIZE_PROTOCOL else "shrink",
        "action": str(elastic.pk),
        "attempt": 1,
        "allocation": {"cpu": 1, "memory": 16},
        "units": 1,
        "gpus": [],
    }
    assign = await communicator.receive_json_from(timeout=5)
    assert assign["type"] == "assign" and assign["action"]["id"] == str(rigid.pk)
    await communicator.disconnect()


@pytest.mark.parametrize("protocol", [PROTOCOL_VERSION, 4])
async def test_a_round_with_nothing_queued_grows_a_running_elastic_action(
    agent_token, settings, protocol
):
    """An action placed at one core on a busy pool gets more once the pool idles
    (its agent lowers nothing it was promised); an agent older than protocol 5
    cannot raise a run's cores, so its runs keep theirs."""
    settings.TANGRAM_POLICY = "tangram"
    communicator = await _connect(agent_token)
    await communicator.send_json_to({**_register(), "protocol": protocol})
    assert (await communicator.receive_json_from())["type"] == "registered"
    elastic = await database_sync_to_async(_grown_elastic)("node-x", 1)
    report = await database_sync_to_async(schedule_round)()
    assert (report.pending, report.placed) == (0, 0)
    await database_sync_to_async(elastic.refresh_from_db)()
    if protocol < RESIZE_PROTOCOL:
        assert elastic.units == 1
        assert await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return
    capacity = (await database_sync_to_async(Node.objects.get)(name="node-x")).capacity
    assert 1 < elastic.units <= min(8, capacity["cpu"])
    assert elastic.allocation == {"cpu": elastic.units, "memory": 16}
    assert await communicator.receive_json_from(timeout=5) == {
        "type": "resize",
        "action": str(elastic.pk),
        "attempt": 1,
        "allocation": {"cpu": elastic.units, "memory": 16},
        "units": elastic.units,
        "gpus": [],
    }
    # Grown as far as is worth it: the next round changes nothing.
    await database_sync_to_async(schedule_round)()
    assert await communicator.receive_nothing(timeout=0.5)
    await communicator.disconnect()


async def test_a_heartbeat_showing_a_lost_resize_gets_it_again(agent_token):
    """The round resized the action while the message was lost (a Redis blip): the
    agent's heartbeat still reports the cores it had, so the server sends it again."""
    communicator = await _connect(agent_token)
    await communicator.send_json_to(_register())
    assert (await communicator.receive_json_from())["type"] == "registered"
    elastic = await database_sync_to_async(_grown_elastic)("node-x", 1)  # shrunk to 1 unit
    ref = {"action": str(elastic.pk), "attempt": 1}
    await communicator.send_json_to({"type": "heartbeat", "running": [{**ref, "cpu": 2.0}]})
    assert await communicator.receive_json_from(timeout=5) == {
        "type": "resize",
        **ref,
        "allocation": {"cpu": 1, "memory": 16},
        "units": 1,
        "gpus": [],
    }
    # A lost grow too: the agent holds it to fewer cores than it has.
    await communicator.send_json_to({"type": "heartbeat", "running": [{**ref, "cpu": 0.5}]})
    assert (await communicator.receive_json_from(timeout=5))["allocation"]["cpu"] == 1
    # Held to what it has (or an agent that does not say): nothing to send.
    for running in ([{**ref, "cpu": 1.0}], [ref]):
        await communicator.send_json_to({"type": "heartbeat", "running": running})
        assert await communicator.receive_nothing(timeout=0.5)
    await communicator.disconnect()


def _sweep_on_four_gpus(node_name: str) -> Action:
    """A running sandbox sweep elastic in single GPUs, grown to all four, that said
    its run can give GPUs back."""
    return ActionFactory(
        type="sandbox.python",
        node=Node.objects.get(name=node_name),
        state="running",
        demand={"cpu": 1, "memory": 16, "gpu": 1},
        elasticity={"min_units": 1, "max_units": 4, "parallel_fraction": 0.9, "unit_kind": "gpu"},
        allocation={"cpu": 1, "memory": 16, "gpu": 4},
        units=4,
        gpus=["0", "1", "2", "3"],
        may_shrink_gpus=True,
        duration_hint_s=600,
    )


@pytest.mark.parametrize("protocol", [PROTOCOL_VERSION, RESIZE_PROTOCOL])
async def test_a_round_takes_gpus_back_from_a_run_that_may_give_them_up(
    agent_token, settings, protocol
):
    """Two 1-GPU calls wait behind a sweep holding all four GPUs: the round takes two
    back (``resize`` naming the two it keeps) and assigns the calls the other two. An
    agent before protocol 6 cannot tell a run, so its GPUs are never taken back."""
    settings.TANGRAM_POLICY = "tangram"
    communicator = await _connect(agent_token)
    register = {
        **_register(),
        "protocol": protocol,
        "capacity": {"cpu": 8, "memory": 2048, "gpu": 4},
        "gpu_groups": [["0", "1"], ["2", "3"]],
    }
    await communicator.send_json_to(register)
    assert (await communicator.receive_json_from())["type"] == "registered"
    sweep = await database_sync_to_async(_sweep_on_four_gpus)("node-x")
    calls = [
        await database_sync_to_async(ActionFactory)(
            demand={"cpu": 1, "memory": 16, "gpu": 1}, duration_hint_s=5
        )
        for _ in range(2)
    ]
    placed = (await database_sync_to_async(schedule_round)()).placed
    await database_sync_to_async(sweep.refresh_from_db)()
    if protocol < GPU_RESIZE_PROTOCOL:
        assert placed == 0 and (sweep.units, sweep.gpus) == (4, ["0", "1", "2", "3"])
        assert await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return
    assert placed == 2
    assert sweep.units == 2 and sweep.allocation["gpu"] == 2
    assert sweep.gpus[0] == "0" and len(set(sweep.gpus)) == 2
    resize = await communicator.receive_json_from(timeout=5)
    assert resize == {
        "type": "resize",
        "action": str(sweep.pk),
        "attempt": 1,
        "allocation": {"cpu": 1, "memory": 16, "gpu": 2},
        "units": 2,
        "gpus": sweep.gpus,
    }
    handed_out = []
    for _ in calls:
        assign = await communicator.receive_json_from(timeout=5)
        assert assign["type"] == "assign"
        handed_out += assign["action"]["gpus"]
    assert sorted(handed_out + sweep.gpus) == ["0", "1", "2", "3"]
    # A heartbeat still showing the four GPUs (the resize was lost) gets it again.
    ref = {"action": str(sweep.pk), "attempt": 1, "cpu": 1.0}
    await communicator.send_json_to(
        {"type": "heartbeat", "running": [{**ref, "gpus": ["0", "1", "2", "3"]}]}
    )
    assert (await communicator.receive_json_from(timeout=5))["gpus"] == sweep.gpus
    await communicator.send_json_to({"type": "heartbeat", "running": [{**ref, "gpus": sweep.gpus}]})
    assert await communicator.receive_nothing(timeout=0.5)
    await communicator.disconnect()


async def _node_warm(name: str = "node-x") -> list[str]:
    return (await database_sync_to_async(Node.objects.get)(name=name)).warm


async def _heartbeat_is_answered(communicator: WebsocketCommunicator) -> None:
    """The connection still works: a heartbeat holding a cancelled run gets its cancel."""
    action = await database_sync_to_async(ActionFactory)(state="cancelled")
    ref = {"action": str(action.pk), "attempt": 1}
    await communicator.send_json_to({"type": "heartbeat", "running": [ref]})
    assert await communicator.receive_json_from(timeout=5) == {"type": "cancel", **ref}


async def test_a_heartbeats_warm_keys_are_stored_and_one_without_them_leaves_them(agent_token):
    key = scorer_warm_key("1", "def score(samples): ...", {})
    communicator = await _connect(agent_token)
    await communicator.send_json_to({**_register(), "warm": ["image:py"]})
    assert (await communicator.receive_json_from())["type"] == "registered"
    assert await _node_warm() == ["image:py"]

    await communicator.send_json_to({"type": "heartbeat", "running": [], "warm": [key]})
    assert await communicator.receive_nothing(timeout=0.5)
    assert await _node_warm() == [key]
    # An agent older than protocol 4 sends no warm: what is stored stays.
    await communicator.send_json_to({"type": "heartbeat", "running": []})
    assert await communicator.receive_nothing(timeout=0.5)
    assert await _node_warm() == [key]
    # The scorer was let go: the node is warm with nothing.
    await communicator.send_json_to({"type": "heartbeat", "running": [], "warm": []})
    assert await communicator.receive_nothing(timeout=0.5)
    assert await _node_warm() == []
    await communicator.disconnect()


@pytest.mark.parametrize(
    "warm",
    [
        "scorer:abc",
        {"scorer:abc": True},
        [1],
        [None],
        [["scorer:abc"]],
        ["x" * 201],
        [f"scorer:{i}" for i in range(65)],
        ["scorer:\x00"],
    ],
)
async def test_a_malformed_warm_is_ignored_and_the_agent_stays_connected(agent_token, caplog, warm):
    communicator = await _connect(agent_token)
    await communicator.send_json_to({**_register(), "warm": ["image:py"]})
    assert (await communicator.receive_json_from())["type"] == "registered"
    await communicator.send_json_to({"type": "heartbeat", "running": [], "warm": warm})
    await _heartbeat_is_answered(communicator)
    assert await _node_warm() == ["image:py"]
    assert "ignoring malformed warm" in caplog.text
    # Then a well-formed one, on the same connection, is stored.
    await communicator.send_json_to({"type": "heartbeat", "running": [], "warm": ["x" * 200]})
    await _heartbeat_is_answered(communicator)
    assert await _node_warm() == ["x" * 200]
    await communicator.disconnect()


async def test_a_register_with_a_malformed_warm_registers_warm_with_nothing(agent_token):
    communicator = await _connect(agent_token)
    await communicator.send_json_to({**_register(), "warm": "image:py"})
    assert (await communicator.receive_json_from())["type"] == "registered"
    assert await _node_warm() == []
    await communicator.disconnect()
