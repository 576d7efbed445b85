"""Input and output shapes of actions on the API."""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from rest_framework import serializers

from apps.actions.models import Action
from apps.actions.types import ACTION_TYPES, is_resource_kind
from apps.core.exceptions import ApplicationError
from tangram_agent.protocol import SCORER_WARM_PREFIX


def _refuse_nul(value: Any) -> None:
    """Refuse a JSON value with a NUL character in any string, naming where: PostgreSQL
    stores none (DRF's string fields refuse it already; JSON fields do not)."""
    path: list[str] = []

    def holds_nul(item: Any) -> bool:
        if isinstance(item, str):
            return "\x00" in item
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            return False
        for key, child in children:
            if isinstance(key, str) and "\x00" in key:
                return True
            if holds_nul(child):
                path.insert(0, str(key))
                return True
        return False

    if not holds_nul(value):
        return
    detail: Any = [
        "Contains a NUL character (\\u0000), which cannot be stored; encode binary data "
        "(base64, say)."
    ]
    for key in reversed(path):
        detail = {key: detail}
    raise serializers.ValidationError(detail)


class ElasticitySerializer(serializers.Serializer):
    min_units = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    max_units = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    parallel_fraction = serializers.FloatField(min_value=0, max_value=1, default=0.0)
    unit_kind = serializers.CharField(max_length=64, default="cpu")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["max_units"] < attrs["min_units"]:
            raise serializers.ValidationError({"max_units": ["Must be >= min_units."]})
        return attrs


class EmptyAsNullField(serializers.CharField):
    """A string column where "" means none, shown as null as the input takes it."""

    def to_representation(self, value: str) -> str | None:
        return value or None


class ActionInputSerializer(serializers.Serializer):
    type = serializers.CharField(max_length=64)
    payload = serializers.JSONField(default=dict)
    job = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    trajectory = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    demand = serializers.JSONField(required=False)
    priority = serializers.IntegerField(min_value=-1000, max_value=1000, default=0)
    timeout_s = serializers.FloatField(required=False, min_value=0.001)
    duration_hint_s = serializers.FloatField(required=False, min_value=0, allow_null=True)
    remaining_hint_s = serializers.FloatField(
        required=False,
        min_value=0,
        allow_null=True,
        help_text="Run seconds (at minimum units) the action's trajectory will still submit "
        "after it: 0 for its last. Ordered by with its own: a trajectory's ACTs sum to its "
        "life less its think time, so actions of trajectories with little left go first.",
    )
    setup_hint_s = serializers.FloatField(
        required=False,
        min_value=0,
        allow_null=True,
        help_text="Seconds a run spends setting up on a node without its affinity keys (a "
        "reward model's load). With it, the scheduler sets up a cold run where a node has a "
        "free warm slot rather than evict another key, and may wait for a warm node.",
    )
    elasticity = ElasticitySerializer(
        required=False,
        help_text="May run on more units of unit_kind when the pool is idle; demand is for "
        "min_units, and speedup follows Amdahl's law with parallel_fraction.",
    )
    affinity = serializers.ListField(
        child=serializers.CharField(max_length=200),
        max_length=16,
        default=list,
        help_text="Warm-state keys (an image, a model) of the nodes it prefers. The server adds "
        "a reward.python action's scorer key (scorer:<digest>); keys starting with scorer: "
        "are reserved.",
    )
    batch_key = serializers.CharField(
        max_length=200,
        required=False,
        allow_null=True,
        help_text="Actions of one tenant and type with the same key (a reward model, say) may "
        "be placed together on one node, sharing one member's demand, when they outnumber the "
        "free slots; each still runs as its own execution.",
    )
    batch_limit = serializers.IntegerField(
        min_value=1,
        max_value=256,
        default=1,
        help_text="Most actions in one batch; 1 (never batched) without a batch_key.",
    )
    may_split_gpus = serializers.BooleanField(
        default=False,
        help_text="Runs as well on GPUs of different NVLink groups of a node (data-parallel "
        "work): it may take, and grow into, free GPUs of any group. By default a multi-GPU "
        "action, and its growth, keeps to one group.",
    )
    may_shrink_gpus = serializers.BooleanField(
        default=False,
        help_text="Its run can give GPUs above elasticity.min_units back while it runs "
        "(data-parallel shards that checkpoint): the scheduler may take them back for actions "
        "that wait, rewriting the file TANGRAM_GPUS_FILE names to the GPU ids the run keeps; "
        "the run must stop using the others. Only for sandbox types elastic in single GPUs "
        "(elasticity.unit_kind gpu, demand gpu equal to elasticity.min_units).",
    )

    def validate_type(self, value: str) -> str:
        if value not in ACTION_TYPES:
            raise serializers.ValidationError(
                f"Unknown action type {value!r}; known types: {', '.join(sorted(ACTION_TYPES))}."
            )
        return value

    def validate_payload(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("Must be a JSON object.")
        _refuse_nul(value)
        size = len(json.dumps(value))
        if size > settings.TANGRAM_MAX_PAYLOAD_BYTES:
            raise serializers.ValidationError(
                f"Payload is {size} bytes; the limit is {settings.TANGRAM_MAX_PAYLOAD_BYTES}."
            )
        return value

    def validate_demand(self, value: Any) -> dict[str, float]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("Must be an object of resource kind to amount.")
        _refuse_nul(value)
        errors: dict[str, str] = {}
        for kind, amount in value.items():
            if not is_resource_kind(kind):
                errors[kind] = (
                    "Unknown resource kind; use cpu, memory, gpu, gpu_memory or api:<name>."
                )
            elif isinstance(amount, bool) or not isinstance(amount, int | float):
                errors[kind] = "Must be a number."
            elif not math.isfinite(amount) or amount < 0:
                errors[kind] = "Must be a finite number >= 0."
            elif kind == "gpu" and amount != int(amount):
                # A placement hands out whole devices by id; share one through gpu_memory.
                errors[kind] = "Must be a whole number of GPUs."
        if errors:
            raise serializers.ValidationError(errors)
        return {kind: float(amount) for kind, amount in value.items()}

    def validate_affinity(self, value: list[str]) -> list[str]:
        if any(key.startswith(SCORER_WARM_PREFIX) for key in value):
            raise serializers.ValidationError(
                f"Keys starting with {SCORER_WARM_PREFIX!r} are reserved: the server adds "
                "a reward.python action's own."
            )
        return value

    def validate_timeout_s(self, value: float) -> float:
        if value > settings.TANGRAM_MAX_TIMEOUT_S:
            raise serializers.ValidationError(
                f"Must be at most {settings.TANGRAM_MAX_TIMEOUT_S} seconds."
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        action_type = ACTION_TYPES[attrs["type"]]
        try:
            action_type.check_payload(attrs["payload"])
        except ApplicationError as exc:
            raise serializers.ValidationError({exc.field or "payload": [exc.message]}) from None
        if "demand" not in attrs:
            attrs["demand"] = dict(action_type.default_demand)
        elasticity = attrs.get("elasticity")
        if elasticity and attrs["demand"].get(elasticity["unit_kind"], 0) <= 0:
            raise serializers.ValidationError(
                {"elasticity.unit_kind": ["Must be a kind the demand asks for."]}
            )
        if attrs["may_shrink_gpus"] and not (
            attrs["type"].startswith("sandbox.")
            and elasticity
            and elasticity["unit_kind"] == "gpu"
            and attrs["demand"].get("gpu") == elasticity["min_units"]
        ):
            raise serializers.ValidationError(
                {
                    "may_shrink_gpus": [
                        "Only for sandbox.python and sandbox.bash actions elastic in single "
                        "GPUs: elasticity.unit_kind gpu, demand gpu equal to min_units."
                    ]
                }
            )
        if attrs.get("batch_key") is None:
            if attrs["batch_limit"] != 1:
                raise serializers.ValidationError(
                    {"batch_limit": ["Must be 1 without a batch_key."]}
                )
            attrs["batch_key"] = ""
        attrs.setdefault("timeout_s", settings.TANGRAM_DEFAULT_TIMEOUT_S)
        return attrs


class ActionOutputSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    act_s = serializers.FloatField(read_only=True, allow_null=True)
    batch_key = EmptyAsNullField(read_only=True, allow_null=True)
    batch_id = EmptyAsNullField(
        read_only=True,
        allow_null=True,
        help_text="Shared by the actions placed together as one batch.",
    )
    waiting = serializers.SerializerMethodField(
        help_text="Why a queued action is not placed yet (on GET); null otherwise."
    )

    def get_waiting(self, action: Action) -> str | None:
        reasons: dict[Any, str] = self.context.get("waiting", {})
        return reasons.get(action.id)

    class Meta:
        model = Action
        fields = [
            "id",
            "type",
            "job",
            "trajectory",
            "state",
            "priority",
            "demand",
            "timeout_s",
            "duration_hint_s",
            "remaining_hint_s",
            "position",
            "setup_hint_s",
            "elasticity",
            "affinity",
            "batch_key",
            "batch_limit",
            "may_split_gpus",
            "may_shrink_gpus",
            "attempt",
            "node",
            "allocation",
            "units",
            "gpus",
            "batch_id",
            "waiting",
            "exit_code",
            "stdout",
            "stderr",
            "stdout_truncated",
            "stderr_truncated",
            "error",
            "submitted_at",
            "assigned_at",
            "started_at",
            "finished_at",
            "act_s",
        ]
        read_only_fields = fields
