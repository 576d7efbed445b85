from __future__ import annotations

import uuid

from django.db import models


class Node(models.Model):
    """A machine whose agent offers capacity; ``capacity`` is per resource kind."""

    class State(models.TextChoices):
        ONLINE = "online"
        OFFLINE = "offline"
        DRAINING = "draining"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=128, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ONLINE)
    capacity = models.JSONField(default=dict)
    executors = models.JSONField(default=list)
    warm = models.JSONField(default=list, blank=True)
    #: Warm keys the node keeps at most (its agent's idle resident scorers); 0: no bound known.
    warm_slots = models.PositiveSmallIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    #: GPU ids per interconnect group (NVLink island, host bridge); as many as ``capacity["gpu"]``.
    gpu_groups = models.JSONField(default=list, blank=True)
    #: The protocol its agent registered with: what messages it understands.
    protocol = models.PositiveSmallIntegerField(default=1)
    registered_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["state", "last_seen_at"])]

    def __str__(self) -> str:
        return self.name


class WarmKeyUse(models.Model):
    """When a round last placed an action with this warm key in its affinity, on any
    node: a key nobody has used for a while may be evicted for one an action waits
    for (``Snapshot.warm_used_at``). One row per key ever used."""

    key = models.CharField(max_length=200, primary_key=True)
    used_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key} at {self.used_at:%H:%M:%S}"


class AgentToken(models.Model):
    """A credential for agents to connect; only its SHA-256 digest is stored."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
