from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.inventory.models import Node
from apps.tenants.models import Tenant


class ActionState(models.TextChoices):
    QUEUED = "queued"
    ASSIGNED = "assigned"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


TERMINAL_STATES = frozenset(
    {ActionState.SUCCEEDED, ActionState.FAILED, ActionState.CANCELLED, ActionState.TIMED_OUT}
)
PLACED_STATES = frozenset({ActionState.ASSIGNED, ActionState.RUNNING})


class Action(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="actions")
    job = models.CharField(max_length=200, blank=True, db_index=True)
    trajectory = models.CharField(max_length=200, blank=True)
    type = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    demand = models.JSONField(default=dict)
    priority = models.IntegerField(default=0)
    timeout_s = models.FloatField()
    duration_hint_s = models.FloatField(null=True, blank=True)
    #: Run seconds (at minimum units) the client says the action's trajectory will
    #: still submit after it: 0 for its last; null: not said.
    remaining_hint_s = models.FloatField(null=True, blank=True)
    #: Actions its trajectory had submitted before it (0: the first); null: no
    #: trajectory named. Without ``remaining_hint_s``, what the trajectory still has
    #: to run is learned by this position and its type (``TrajectoryPositionStat``).
    position = models.PositiveIntegerField(null=True, blank=True)
    #: Whether its run is in its job's ``TrajectoryPositionStat`` yet: its
    #: trajectory is folded in once it has gone quiet (``trajectories_fold_ended``).
    trajectory_counted = models.BooleanField(default=False)
    #: Seconds a run spends setting up on a node without its ``affinity`` keys
    #: (a scorer's model load), as the client says; null: none known.
    setup_hint_s = models.FloatField(null=True, blank=True)
    #: ``{min_units, max_units, parallel_fraction, unit_kind}``; empty: not elastic.
    elasticity = models.JSONField(default=dict, blank=True)
    #: Warm-state keys (``image:…``, ``model:…``) a node may already have.
    affinity = models.JSONField(default=list, blank=True)
    #: Actions of one tenant and type sharing a key (a reward model, say) may be
    #: placed as one batch on one node when they outnumber the free slots; "": never.
    batch_key = models.CharField(max_length=200, blank=True, default="")
    #: Most members in one batch (1 without a ``batch_key``).
    batch_limit = models.PositiveIntegerField(default=1)
    #: Its GPUs need not share an NVLink group (``PendingAction.may_split_gpus``).
    may_split_gpus = models.BooleanField(default=False)
    #: Its run can give GPUs above its minimum back while it runs (it reads
    #: ``TANGRAM_GPUS_FILE``): the scheduler may take them back (``Resizable.gpus``).
    may_shrink_gpus = models.BooleanField(default=False)

    state = models.CharField(max_length=16, choices=ActionState.choices, default=ActionState.QUEUED)
    attempt = models.PositiveIntegerField(default=1)
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL)
    allocation = models.JSONField(default=dict, blank=True)
    units = models.PositiveIntegerField(default=1)
    #: When the running action's ``units`` last changed, and the work it had done
    #: by then (seconds at its minimum units): growing or shrinking changes the
    #: pace, so the work done is this plus the time since at the new units' speed.
    resized_at = models.DateTimeField(null=True, blank=True)
    done_at_resize_s = models.FloatField(default=0.0)
    #: GPU ids held on ``node`` while placed, all in one interconnect group.
    gpus = models.JSONField(default=list, blank=True)
    #: Shared by the members of the batch this placement made; "": not batched.
    batch_id = models.CharField(max_length=64, blank=True, default="")
    #: Members of that batch: the agent runs them in one pass (``reward.python``)
    #: or one at a time, with ``allocation`` x ``batch_size`` (the batch's whole allocation).
    batch_size = models.PositiveIntegerField(default=1)

    exit_code = models.IntegerField(null=True, blank=True)
    stdout = models.TextField(blank=True)
    stderr = models.TextField(blank=True)
    stdout_truncated = models.BooleanField(default=False)
    stderr_truncated = models.BooleanField(default=False)
    error = models.TextField(blank=True)

    submitted_at = models.DateTimeField(default=timezone.now)
    assigned_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["priority", "submitted_at"],
                condition=Q(state="queued"),
                name="action_queue_idx",
            ),
            models.Index(fields=["tenant", "state"], name="action_tenant_state_idx"),
            models.Index(fields=["node", "state"], name="action_node_state_idx"),
            models.Index(fields=["tenant", "type", "finished_at"], name="action_stats_idx"),
            # A batch's members, read as each one ends (what the batch cost).
            models.Index(fields=["batch_id"], condition=~Q(batch_id=""), name="action_batch_idx"),
            # A trajectory's actions, counted as one is submitted (its position).
            models.Index(
                fields=["tenant", "job", "trajectory"],
                condition=~Q(trajectory=""),
                name="action_trajectory_idx",
            ),
            # Trajectories not yet folded into their job's stat.
            models.Index(
                fields=["tenant", "job", "trajectory"],
                condition=Q(position__isnull=False, trajectory_counted=False),
                name="action_uncounted_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in ActionState]), name="action_state_valid"
            ),
            models.CheckConstraint(
                condition=~Q(state__in=["assigned", "running"]) | Q(node__isnull=False),
                name="action_placed_has_node",
            ),
            models.CheckConstraint(condition=Q(timeout_s__gt=0), name="action_timeout_gt_0"),
            models.CheckConstraint(
                condition=Q(batch_limit__gte=1, batch_limit__lte=256),
                name="action_batch_limit_range",
            ),
            models.CheckConstraint(
                condition=~Q(batch_key="") | Q(batch_limit=1), name="action_batch_limit_needs_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id} ({self.state})"

    @property
    def act_s(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.submitted_at).total_seconds()


class ActionEvent(models.Model):
    """One state transition, so that ACT and its parts (wait, setup, run) are known."""

    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="events")
    state = models.CharField(max_length=16, choices=ActionState.choices)
    attempt = models.PositiveIntegerField()
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL)
    at = models.DateTimeField()
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        indexes = [models.Index(fields=["action", "at"])]

    def __str__(self) -> str:
        return f"{self.action_id} {self.state} at {self.at:%H:%M:%S.%f}"


class ActionDurationStat(models.Model):
    """Observed run time per (tenant, type), updated as actions succeed.

    The policy's duration estimates read this small table every round instead
    of aggregating the action history.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    type = models.CharField(max_length=64)
    count = models.PositiveIntegerField(default=0)
    mean_s = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "type"], name="duration_stat_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.type}: {self.mean_s:.3f}s over {self.count}"


class TrajectoryPositionStat(models.Model):
    """What one (tenant, job)'s ended trajectories ran after their actions of one
    type at one position: ``count`` such actions, after which their trajectories
    ran ``rest_s`` seconds in all at minimum units. The policy's estimate of what
    a trajectory has left after an action reads these rows
    (``estimate.learned_rest``)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    job = models.CharField(max_length=200, blank=True)
    position = models.PositiveIntegerField()
    type = models.CharField(max_length=64)
    count = models.PositiveIntegerField(default=0)
    rest_s = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "job", "position", "type"],
                name="trajectory_position_type_stat_unique",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.tenant_id} {self.job}[{self.position}] {self.type}: "
            f"{self.rest_s:.3f}s after {self.count}"
        )


class ActionBatchStat(models.Model):
    """What batching cost per (tenant, type), updated as batches succeed: each
    member past the first adds ``marginal`` x one member's run time. The policy
    batches only where that lowers mean ACT."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    type = models.CharField(max_length=64)
    count = models.PositiveIntegerField(default=0)
    marginal = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "type"], name="batch_stat_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.type}: {self.marginal:.3f} a member over {self.count}"


class ActionLoadStat(models.Model):
    """What one (tenant, type) held of its primary ``kind`` at the latest round,
    at minimum units, and on average lately (``tangram_policy.estimate.decayed_mean``).

    A round reads it to keep room for a short type between its steps
    (``Snapshot.type_loads``) and writes it back with what it saw.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    type = models.CharField(max_length=64)
    #: The job whose actions of the type the latest round saw ("": several jobs').
    job = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(max_length=64)
    #: One action's demand, every kind, as the latest round saw it: room of the
    #: other kinds is kept in proportion (``TypeLoad.demand``).
    demand = models.JSONField(default=dict, blank=True)
    held = models.FloatField(default=0.0)
    mean_held = models.FloatField(default=0.0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "type"], name="load_stat_unique"),
        ]

    def __str__(self) -> str:
        held = f"{self.held:g} {self.kind} held, {self.mean_held:.2f} lately"
        return f"{self.tenant_id} {self.type}: {held}"
