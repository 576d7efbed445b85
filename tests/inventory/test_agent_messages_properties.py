"""Any message an agent sends is answered or refused with a reason; none breaks the
socket's consumer (hypothesis, against the real PostgreSQL and Redis)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.inventory.services import agent_token_issue
from tangram_agent.protocol import PROTOCOL_VERSION, RESULT_STATES
from tests.factories import succeeded_result
from tests.inventory.test_agent_consumer import _connect, _register

pytestmark = pytest.mark.django_db(transaction=True)

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
NOW = time.time()
IDS = st.one_of(st.uuids().map(str), JUNK)
ATTEMPTS = st.one_of(st.integers(1, 3), JUNK)
TIMES = st.one_of(st.floats(NOW - 10, NOW + 10), JUNK)
TEXT = st.one_of(st.text(max_size=20), JUNK)
RUNNING = st.one_of(
    st.lists(
        st.fixed_dictionaries({"action": IDS, "attempt": ATTEMPTS}, optional={"cpu": JUNK}),
        max_size=2,
    ),
    JUNK,
)
MESSAGES = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("result"),
            "action": IDS,
            "attempt": ATTEMPTS,
            "state": st.one_of(st.sampled_from(RESULT_STATES), JUNK),
            "exit_code": st.one_of(st.integers(-255, 255), JUNK),
            "stdout": TEXT,
            "stderr": TEXT,
            "stdout_truncated": st.one_of(st.booleans(), JUNK),
            "stderr_truncated": st.one_of(st.booleans(), JUNK),
            "finished_at": TIMES,
        },
        optional={"error": TEXT, "started_at": TIMES},
    ),
    st.fixed_dictionaries(
        {"type": st.just("started"), "action": IDS, "attempt": ATTEMPTS, "started_at": TIMES}
    ),
    st.fixed_dictionaries(
        {"type": st.just("heartbeat")},
        optional={"running": RUNNING, "warm": st.one_of(st.lists(TEXT, max_size=2), JUNK)},
    ),
    st.fixed_dictionaries({"type": st.one_of(st.text(max_size=8), JUNK)}),
    JUNK,
)
REGISTERS = st.fixed_dictionaries(
    {"type": st.just("register"), "protocol": st.just(PROTOCOL_VERSION)},
    optional={
        "node": st.one_of(st.text(min_size=1, max_size=10), JUNK),
        "capacity": st.one_of(st.dictionaries(st.text(max_size=5), JUNK, max_size=2), JUNK),
        "executors": st.one_of(st.lists(TEXT, max_size=2), JUNK),
        "labels": st.one_of(st.dictionaries(st.text(max_size=5), TEXT, max_size=2), JUNK),
        "running": RUNNING,
        "warm": st.one_of(st.lists(TEXT, max_size=2), JUNK),
    },
)


async def _exchange(token: str, first: dict[str, Any] | None, message: Any) -> None:
    """Send ``message`` after a register (``first``, or a good one): the server refuses
    it with a reason and closes, or goes on answering (a result gets its ack)."""
    communicator = await _connect(token)
    await communicator.send_json_to(first or _register())
    reply = await communicator.receive_json_from(timeout=5)
    if first is not None and reply["type"] == "error":
        assert reply["message"], reply
        await communicator.disconnect()
        return
    assert reply["type"] == "registered", reply
    await communicator.send_json_to(message)
    probe = succeeded_result(uuid.uuid4(), 1, started_at=NOW, finished_at=NOW)
    await communicator.send_json_to(probe)
    while True:  # what the message may bring first: assignments, cancels, resizes
        reply = await communicator.receive_json_from(timeout=5)
        if reply["type"] == "error":
            assert reply["message"].startswith(("malformed", "unknown message type")), reply
            break
        if reply["type"] == "ack" and reply["action"] == probe["action"]:
            break
    await communicator.disconnect()


@pytest.fixture
def token(db: Any) -> str:
    return agent_token_issue(name="fuzz")[1]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(message=MESSAGES)
def test_any_message_after_a_register_is_answered_or_refused(token: str, message: Any) -> None:
    async_to_sync(_exchange)(token, None, message)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(register=REGISTERS)
def test_any_register_is_taken_or_refused(token: str, register: dict[str, Any]) -> None:
    async_to_sync(_exchange)(token, register, {"type": "heartbeat", "running": []})
