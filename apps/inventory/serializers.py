"""What an agent may send: each message's shape, checked before a service sees it.

An agent is trusted with its node, not with every value it sends: a message
that is malformed (an agent's bug, a version skew) is refused naming its field,
rather than failing in the database and dropping the socket without a word.
``warm``, ``warm_slots`` and ``gpu_groups`` keep the services' own checks
(:mod:`apps.inventory.services`), which ignore a malformed warm report rather
than refuse it.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from tangram_agent.protocol import RESULT_STATES

#: PostgreSQL's integer column.
INT_MAX = 2**31 - 1
#: Unix seconds up to the year 2286: later is a broken clock, not a time.
UNIX_MAX_S = 1e10


class ActionIdField(serializers.UUIDField):
    """An action id, as the text the services compare."""

    def to_internal_value(self, data: Any) -> str:
        return str(super().to_internal_value(data))


class OutputField(serializers.CharField):
    """Program output as it can be stored: PostgreSQL text holds no NUL, so each one
    becomes U+FFFD (a program that prints one still gets its result kept)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_blank=True, trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        return str(super().to_internal_value(data)).replace("\x00", "\ufffd")


def _attempt() -> serializers.IntegerField:
    return serializers.IntegerField(min_value=1, max_value=INT_MAX)


def _unix_s(**kwargs: Any) -> serializers.FloatField:
    return serializers.FloatField(min_value=0, max_value=UNIX_MAX_S, **kwargs)


def _check_keys(value: dict[str, Any]) -> dict[str, Any]:
    for key in value:
        if not key or len(key) > 200 or "\x00" in key:
            raise serializers.ValidationError(
                f"Key {key!r} must be 1 to 200 characters, none of them NUL."
            )
    return value


class RunningSerializer(serializers.Serializer):
    action = ActionIdField()
    attempt = _attempt()
    cpu = serializers.FloatField(required=False, min_value=0)
    gpus = serializers.ListField(
        child=serializers.CharField(max_length=64), max_length=64, required=False
    )


class RegisterSerializer(serializers.Serializer):
    node = serializers.CharField(max_length=128)
    capacity = serializers.DictField(child=serializers.FloatField(min_value=0))
    executors = serializers.ListField(child=serializers.CharField(max_length=64), max_length=64)
    labels = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=200), required=False
    )
    running = RunningSerializer(many=True, required=False)
    sent_at = _unix_s(required=False)

    def validate_capacity(self, value: dict[str, Any]) -> dict[str, Any]:
        return _check_keys(value)

    def validate_labels(self, value: dict[str, Any]) -> dict[str, Any]:
        return _check_keys(value)


class HeartbeatSerializer(serializers.Serializer):
    running = RunningSerializer(many=True, required=False)
    sent_at = _unix_s(required=False)


class StartedSerializer(serializers.Serializer):
    action = ActionIdField()
    attempt = _attempt()
    started_at = _unix_s()


class ResultSerializer(serializers.Serializer):
    action = ActionIdField()
    attempt = _attempt()
    state = serializers.ChoiceField(choices=sorted(RESULT_STATES))
    exit_code = serializers.IntegerField(min_value=-INT_MAX - 1, max_value=INT_MAX, allow_null=True)
    stdout = OutputField()
    stderr = OutputField()
    stdout_truncated = serializers.BooleanField()
    stderr_truncated = serializers.BooleanField()
    error = OutputField(required=False)
    started_at = _unix_s(allow_null=True, required=False)
    finished_at = _unix_s()


#: Per message type, its serializer.
MESSAGES: dict[str, type[serializers.Serializer]] = {
    "register": RegisterSerializer,
    "heartbeat": HeartbeatSerializer,
    "started": StartedSerializer,
    "result": ResultSerializer,
}


def checked_message(kind: str, content: dict[str, Any]) -> dict[str, Any]:
    """``content`` with its checked fields as validated (others as sent); raises
    ``serializers.ValidationError`` naming each field at fault."""
    serializer = MESSAGES[kind](data=content)
    serializer.is_valid(raise_exception=True)
    return {**content, **serializer.validated_data}
