"""A node's warm keys from heartbeats: stored, and shown on the dashboards when they change."""

from __future__ import annotations

import pytest

from apps.core import events
from apps.inventory.models import Node
from apps.inventory.services import node_heartbeat, node_register
from tangram_agent.protocol import PROTOCOL_VERSION, scorer_warm_key

pytestmark = pytest.mark.django_db


def _register(name: str, **extra: object) -> dict[str, object]:
    return {
        "type": "register",
        "protocol": PROTOCOL_VERSION,
        "node": name,
        "capacity": {"cpu": 2, "memory": 1024},
        "executors": ["reward.python"],
        "warm": [],
        "labels": {},
        "running": [],
        **extra,
    }


def test_a_change_of_warm_keys_refreshes_the_dashboards_and_no_change_does_not(
    django_capture_on_commit_callbacks,
):
    node, _, _ = node_register(message=_register("node-w"))
    key = scorer_warm_key("1", "def score(samples): ...", {})
    for warm, refreshes in (([key], True), ([key], False), (None, False), ([], True)):
        with django_capture_on_commit_callbacks() as callbacks:
            node_heartbeat(node_id=node.pk, running=[], warm=warm)
        assert (events.dashboard_changed in callbacks) is refreshes, warm
    assert Node.objects.get(pk=node.pk).warm == []


@pytest.mark.parametrize(("reported", "stored"), [(3, 3), (None, 0), (-1, 0), ("3", 0), (True, 0)])
def test_a_register_stores_how_many_warm_keys_the_node_keeps(reported, stored):
    """What the policy bounds cold setups by; a malformed count is no bound, not a refusal."""
    extra = {} if reported is None else {"warm_slots": reported}
    node, _, _ = node_register(message=_register("node-s", **extra))
    assert Node.objects.get(pk=node.pk).warm_slots == stored
