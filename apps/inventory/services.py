"""Writes for nodes: agent tokens, registration, heartbeats, lost leases."""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.actions.models import PLACED_STATES, Action, ActionState
from apps.actions.services import actions_requeue
from apps.core import events
from apps.core.exceptions import ApplicationError
from apps.inventory.models import AgentToken, Node
from apps.tenants.services import token_digest
from tangram_agent.gpus import check_gpu_groups
from tangram_agent.protocol import ActionRef, Assignment, Register

logger = logging.getLogger(__name__)

#: The most warm-state keys a node may report, and the longest key.
MAX_WARM_KEYS = 64
MAX_WARM_KEY_LENGTH = 200


@transaction.atomic
def agent_token_issue(*, name: str, raw: str | None = None) -> tuple[AgentToken, str]:
    raw = raw or "tga_" + secrets.token_urlsafe(32)
    token = AgentToken.objects.create(name=name, prefix=raw[:12], digest=token_digest(raw))
    return token, raw


@transaction.atomic
def agent_tokens_revoke(*, tokens: QuerySet[AgentToken]) -> int:
    return tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


#: The fields ``assignment_of`` (and the assigned event) reads: load only these.
ASSIGNMENT_FIELDS = (
    "id",
    "attempt",
    "type",
    "payload",
    "allocation",
    "units",
    "timeout_s",
    "gpus",
    "batch_id",
    "batch_size",
    "node",
    "tenant",
)


#: What ``resize_of`` reads of an action.
RESIZE_FIELDS = ("id", "attempt", "allocation", "units", "gpus")


def resize_of(action: Action) -> dict[str, Any]:
    """The ``resize`` message for ``action``'s current allocation, less its type."""
    return {
        "action": str(action.pk),
        "attempt": action.attempt,
        "allocation": action.allocation,
        "units": action.units,
        "gpus": action.gpus,
    }


def assignment_of(action: Action) -> Assignment:
    return {
        "id": str(action.pk),
        "attempt": action.attempt,
        "type": action.type,
        "payload": action.payload,
        "allocation": action.allocation,
        "units": action.units,
        "timeout_s": action.timeout_s,
        "gpus": action.gpus,
        "batch_id": action.batch_id or None,
        "batch_size": action.batch_size,
        "tenant": str(action.tenant_id),
    }


def _checked_gpu_groups(message: Register) -> list[list[str]]:
    """The register's GPU groups, if they name each of its ``capacity["gpu"]`` GPUs once.

    Every GPU needs an id: the scheduler hands out ids, and the agent shows a
    run only the GPUs it holds.
    """
    groups = message.get("gpu_groups") or []
    if not isinstance(groups, list) or not all(isinstance(group, list) for group in groups):
        raise ApplicationError("gpu_groups must be a list of lists of GPU ids.", field="gpu_groups")
    try:
        check_gpu_groups(tuple(tuple(group) for group in groups))
    except ValueError as exc:
        raise ApplicationError(f"gpu_groups: {exc}.", field="gpu_groups") from None
    count = sum(len(group) for group in groups)
    declared = message["capacity"].get("gpu", 0)
    if count != declared:
        raise ApplicationError(
            f"gpu_groups list {count} GPU(s) but capacity gpu is {declared:g}.",
            field="gpu_groups",
        )
    return groups


def _checked_warm(node: Any, warm: Any) -> list[str] | None:
    """``warm`` if it is a list of at most MAX_WARM_KEYS keys, each a string of at most
    MAX_WARM_KEY_LENGTH characters and no NUL; else None, with a warning.

    A malformed report is ignored rather than refused: warm state only steers
    placement, and dropping the agent for it would lose its running actions.
    """
    if (
        isinstance(warm, list)
        and len(warm) <= MAX_WARM_KEYS
        and all(
            isinstance(key, str) and len(key) <= MAX_WARM_KEY_LENGTH and "\x00" not in key
            for key in warm
        )
    ):
        return warm
    logger.warning(
        "node %s: ignoring malformed warm (not a list of at most %d strings of at most %d "
        "characters): %.200r",
        node,
        MAX_WARM_KEYS,
        MAX_WARM_KEY_LENGTH,
        warm,
    )
    return None


def _checked_warm_slots(node: Any, slots: Any) -> int:
    """``slots`` if it is a whole number from 0 to MAX_WARM_KEYS; else 0 (no bound
    known), with a warning: like ``warm``, it only steers placement."""
    if isinstance(slots, int) and not isinstance(slots, bool) and 0 <= slots <= MAX_WARM_KEYS:
        return slots
    logger.warning(
        "node %s: ignoring malformed warm_slots (not a whole number from 0 to %d): %.200r",
        node,
        MAX_WARM_KEYS,
        slots,
    )
    return 0


def _held(running: list[ActionRef]) -> set[tuple[str, int]]:
    return {(ref["action"], int(ref["attempt"])) for ref in running}


def _stale(node_id: Any, held: set[tuple[str, int]]) -> list[ActionRef]:
    """Runs the agent holds that are no longer this node's: cancelled, or re-queued
    after a lost lease. The agent should stop them to free the capacity."""
    if not held:
        return []
    current = {
        (str(pk), attempt)
        for pk, attempt in Action.objects.filter(
            pk__in=[a for a, _ in held], node_id=node_id, state__in=PLACED_STATES
        ).values_list("pk", "attempt")
    }
    return [{"action": a, "attempt": n} for a, n in sorted(held - current)]


@transaction.atomic
def node_register(*, message: Register) -> tuple[Node, list[Assignment], list[ActionRef]]:
    """Upsert the node; return the assignments its agent should (re)receive and
    the runs it should stop.

    Actions this node was running that the agent no longer holds were lost with
    its previous process: they go back to the queue. A register whose GPUs do
    not add up is refused before anything is stored.
    """
    gpu_groups = _checked_gpu_groups(message)
    # A restarted agent holds no resident scorer from before: malformed means none.
    warm = _checked_warm(message["node"], message.get("warm", [])) or []
    warm_slots = _checked_warm_slots(message["node"], message.get("warm_slots", 0))
    now = timezone.now()
    node, created = Node.objects.select_for_update().get_or_create(
        name=message["node"],
        defaults={
            "capacity": message["capacity"],
            "executors": message["executors"],
            "warm": warm,
            "warm_slots": warm_slots,
            "labels": message.get("labels", {}),
            "gpu_groups": gpu_groups,
            "protocol": message["protocol"],
            "last_seen_at": now,
        },
    )
    if not created:
        node.capacity = message["capacity"]
        node.executors = message["executors"]
        node.warm = warm
        node.warm_slots = warm_slots
        node.labels = message.get("labels", {})
        node.gpu_groups = gpu_groups
        node.protocol = message["protocol"]
        node.state = Node.State.ONLINE
        node.last_seen_at = now
        node.save()
    held = _held(message.get("running", []))
    placed = Action.objects.filter(node=node, state__in=PLACED_STATES)
    lost = [
        a.pk
        for a in placed.filter(state=ActionState.RUNNING).only("id", "attempt")
        if (str(a.pk), a.attempt) not in held
    ]
    if lost:
        actions_requeue(
            actions=Action.objects.filter(pk__in=lost),
            reason=f"agent on {node.name} restarted without them",
        )
    resend = [
        assignment_of(a)
        for a in placed.filter(state=ActionState.ASSIGNED)
        if (str(a.pk), a.attempt) not in held
    ]
    transaction.on_commit(events.capacity_changed)
    return node, resend, _stale(node.pk, held)


@transaction.atomic
def node_heartbeat(
    *, node_id: Any, running: list[ActionRef], warm: Any = None
) -> tuple[list[Assignment], list[ActionRef], list[dict[str, Any]]]:
    """Renew the lease, store the node's ``warm`` keys (protocol 4; None: an older
    agent, left as it is); return what the agent lacks, what it should stop, and
    the resizes it missed.

    A change of ``warm`` refreshes the dashboards (which show it); it frees no
    room, so no scheduling round is woken.

    Assignments older than two heartbeats that the agent does not hold were
    lost in transit (a Redis blip) and are sent again; the agent ignores one it
    already holds. Runs it holds that are no longer its own are cancelled.
    A run it holds to other cores than its action now has missed its resize.
    """
    now = timezone.now()
    Node.objects.filter(pk=node_id).update(last_seen_at=now, state=Node.State.ONLINE)
    if (
        warm is not None
        and (checked := _checked_warm(node_id, warm)) is not None
        and Node.objects.filter(pk=node_id).exclude(warm=checked).update(warm=checked)
    ):
        transaction.on_commit(events.dashboard_changed)
    held = _held(running)
    cutoff = now - timedelta(seconds=settings.TANGRAM_HEARTBEAT_S * 2)
    resend = [
        assignment_of(a)
        for a in Action.objects.filter(
            node_id=node_id, state=ActionState.ASSIGNED, assigned_at__lt=cutoff
        )
        if (str(a.pk), a.attempt) not in held
    ]
    return resend, _stale(node_id, held), _missed_resizes(node_id, running)


def _missed_resizes(node_id: Any, running: list[ActionRef]) -> list[dict[str, Any]]:
    """``resize`` messages (less their type) for runs held to other cores, or told of
    other GPUs, than their action has."""
    held = {
        (ref["action"], int(ref["attempt"])): ref
        for ref in running
        if "cpu" in ref or "gpus" in ref
    }
    if not held:
        return []
    return [
        resize_of(action)
        for action in Action.objects.filter(
            pk__in=[action for action, _ in held], node_id=node_id, state__in=PLACED_STATES
        ).only(*RESIZE_FIELDS)
        if (ref := held.get((str(action.pk), action.attempt))) is not None
        and (
            (
                "cpu" in ref
                and abs(float(action.allocation.get("cpu", ref["cpu"])) - ref["cpu"]) > 1e-9
            )
            or ("gpus" in ref and sorted(ref["gpus"]) != sorted(map(str, action.gpus)))
        )
    ]


@transaction.atomic
def nodes_reap_lost() -> int:
    """Take nodes whose lease ran out offline and re-queue their actions."""
    cutoff = timezone.now() - timedelta(seconds=settings.TANGRAM_LEASE_S)
    lost = list(
        Node.objects.select_for_update(skip_locked=True).filter(
            state=Node.State.ONLINE, last_seen_at__lt=cutoff
        )
    )
    if not lost:
        return 0
    Node.objects.filter(pk__in=[n.pk for n in lost]).update(state=Node.State.OFFLINE)
    requeued = 0
    for node in lost:
        requeued += actions_requeue(
            actions=Action.objects.filter(node=node),
            reason=f"lease of node {node.name} expired",
        )
    transaction.on_commit(events.capacity_changed)
    return requeued
