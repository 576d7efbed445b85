"""factory_boy factories for the server's models."""

from __future__ import annotations

import factory
from django.contrib.auth.models import User
from django.utils import timezone

from apps.actions.models import Action
from apps.inventory.models import Node
from apps.tenants.models import Quota, Tenant


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"tenant-{n}")


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    tenant = factory.SubFactory(TenantFactory)
    resource = "cpu"
    guaranteed = 0
    limit = 1000


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user-{n}")


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node-{n}")
    capacity = factory.LazyFunction(lambda: {"cpu": 4, "memory": 8192})
    executors = factory.LazyFunction(
        lambda: ["sandbox.python", "sandbox.bash", "reward.python", "sleep"]
    )
    last_seen_at = factory.LazyFunction(timezone.now)


class ActionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Action

    tenant = factory.SubFactory(TenantFactory)
    type = "sleep"
    payload = factory.LazyFunction(lambda: {"seconds": 0})
    demand = factory.LazyFunction(lambda: {"cpu": 1, "memory": 16})
    timeout_s = 60


def succeeded_result(
    action_id: object, attempt: int, *, started_at: float | None, finished_at: float
) -> dict[str, object]:
    """The result message an agent sends for a run that exited 0 with no output."""
    return {
        "type": "result",
        "action": str(action_id),
        "attempt": attempt,
        "state": "succeeded",
        "exit_code": 0,
        "stdout": "",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "error": "",
        "started_at": started_at,
        "finished_at": finished_at,
    }
