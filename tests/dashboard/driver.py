"""Changes the browser test makes to a live server's database, through the real services.

Run as ``python -m tests.dashboard.driver <step>`` with the server's
``DATABASE_URL`` and ``REDIS_URL``, so that the services' after-commit
broadcasts reach the server's dashboard consumers as they would in production.
Each step prints what it did as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

STAFF_USERNAME = "ops"
STAFF_PASSWORD = "dashboard-test-password"
TENANT = "acme"
NODE = "node-a"
NODE_CAPACITY = {"cpu": 4, "memory": 8192, "gpu": 2}
SUBMITTED = 5


def seed() -> dict[str, Any]:
    """Staff, a tenant with a cpu quota, a node of 4 cores and 2 GPUs, and five queued
    one-core actions, the first of which also asks for a GPU."""
    from django.contrib.auth.models import User

    from apps.actions.services import actions_submit
    from apps.inventory.services import node_register
    from apps.tenants.services import quota_set, tenant_create

    User.objects.create_superuser(STAFF_USERNAME, "ops@example.com", STAFF_PASSWORD)
    tenant = tenant_create(name=TENANT)
    quota_set(tenant=tenant, resource="cpu", guaranteed=2, limit=4, lending_limit=1)
    node_register(
        message={
            "type": "register",
            "protocol": 2,
            "node": NODE,
            "capacity": NODE_CAPACITY,
            "gpu_groups": [["0", "1"]],
            "executors": ["sleep"],
            "warm": [],
            "warm_slots": 2,
            "labels": {},
            "running": [],
        }
    )
    spec = {
        "type": "sleep",
        "payload": {"seconds": 60},
        "demand": {"cpu": 1, "memory": 256},
        "timeout_s": 120,
    }
    with_gpu = {**spec, "demand": {**spec["demand"], "gpu": 1}, "priority": 1}
    actions = actions_submit(tenant=tenant, specs=[with_gpu] + [spec] * (SUBMITTED - 1), bulk=True)
    return {"submitted": [str(a.id) for a in actions]}


def schedule() -> dict[str, Any]:
    from apps.scheduling.services import schedule_round

    report = schedule_round()
    return {"placed": report.placed, "pending": report.pending}


def batch() -> dict[str, Any]:
    """Six batchable one-core actions, more than the node's free cores: batches of two."""
    from apps.actions.services import actions_submit
    from apps.tenants.models import Tenant

    spec = {
        "type": "sleep",
        "payload": {"seconds": 60},
        "demand": {"cpu": 1, "memory": 256},
        "timeout_s": 120,
        "batch_key": "rm",
        "batch_limit": 4,
    }
    actions = actions_submit(tenant=Tenant.objects.get(name=TENANT), specs=[spec] * 6, bulk=True)
    return {"submitted": [str(a.id) for a in actions]}


def _placed(state: str) -> list[tuple[Any, Any, int]]:
    from apps.actions.models import Action

    return list(
        Action.objects.filter(node__name=NODE, state=state)
        .order_by("assigned_at", "id")
        .values_list("id", "node_id", "attempt")
    )


def start(count: str) -> dict[str, Any]:
    """What an agent reports when it starts the oldest ``count`` assigned actions."""
    from apps.actions.services import action_mark_started

    started = []
    for action_id, node_id, attempt in _placed("assigned")[: int(count)]:
        action_mark_started(
            node_id=node_id, action_id=str(action_id), attempt=attempt, started_at=time.time()
        )
        started.append(str(action_id))
    return {"started": started}


def finish() -> dict[str, Any]:
    """What an agent reports when every action on the node has succeeded."""
    from apps.actions.services import action_record_result
    from tests.factories import succeeded_result

    finished = []
    for action_id, node_id, attempt in _placed("running") + _placed("assigned"):
        action_record_result(
            node_id=node_id,
            result=succeeded_result(
                action_id, attempt, started_at=time.time(), finished_at=time.time()
            ),
        )
        finished.append(str(action_id))
    return {"finished": finished}


def warm(*keys: str) -> dict[str, Any]:
    """What the node's agent reports in a heartbeat once it keeps scorers loaded."""
    from apps.inventory.models import Node
    from apps.inventory.services import node_heartbeat

    node = Node.objects.get(name=NODE)
    node_heartbeat(node_id=node.pk, running=[], warm=list(keys))
    return {"warm": list(keys)}


STEPS = {
    "seed": seed,
    "schedule": schedule,
    "start": start,
    "finish": finish,
    "batch": batch,
    "warm": warm,
}


def main(argv: list[str]) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tangram_web.settings")
    django.setup()
    step, *args = argv
    print(json.dumps(STEPS[step](*args)))


if __name__ == "__main__":
    main(sys.argv[1:])
