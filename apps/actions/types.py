"""Registered action types: the profile each ``type`` field value refers to.

A profile gives the demand used when the client sends none and checks the
payload's shape, so that a malformed action is refused at submit time rather
than failing on a node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from apps.core.exceptions import ApplicationError

RESOURCE_KINDS = ("cpu", "memory", "gpu", "gpu_memory")
API_KIND_PREFIX = "api:"


def _require_str(payload: Mapping[str, Any], key: str, *, required: bool) -> None:
    if key not in payload:
        if required:
            raise ApplicationError(f"payload.{key} is required.", field=f"payload.{key}")
        return
    if not isinstance(payload[key], str):
        raise ApplicationError(f"payload.{key} must be a string.", field=f"payload.{key}")


def _check_files(payload: Mapping[str, Any], reserved: tuple[str, ...]) -> None:
    files = payload.get("files", {})
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        raise ApplicationError(
            "payload.files must map relative paths to text.", field="payload.files"
        )
    for path in files:
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or not path or path in reserved:
            raise ApplicationError(
                f"payload.files has a path that is not allowed: {path!r}.", field="payload.files"
            )


def _check_sandbox(payload: Mapping[str, Any]) -> None:
    _require_str(payload, "code", required=True)
    _require_str(payload, "stdin", required=False)
    _check_files(payload, ("main.py", "main.sh"))
    args = payload.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ApplicationError("payload.args must be a list of strings.", field="payload.args")


def _check_scorer(payload: Mapping[str, Any]) -> None:
    _require_str(payload, "code", required=True)
    if "sample" not in payload:
        raise ApplicationError("payload.sample is required.", field="payload.sample")
    _check_files(payload, ("main.py", "scorer.py", "samples.json"))
    unknown = sorted(set(payload) - {"code", "sample", "files"})
    if unknown:
        raise ApplicationError(
            f"payload.{unknown[0]} is not a reward.python field (code, sample, files).",
            field=f"payload.{unknown[0]}",
        )


def _check_sleep(payload: Mapping[str, Any]) -> None:
    seconds = payload.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ApplicationError("payload.seconds must be a number >= 0.", field="payload.seconds")
    exit_code = payload.get("exit_code", 0)
    if isinstance(exit_code, bool) or not isinstance(exit_code, int):
        raise ApplicationError("payload.exit_code must be an integer.", field="payload.exit_code")
    _require_str(payload, "stdout", required=False)


@dataclass(frozen=True)
class ActionType:
    name: str
    default_demand: Mapping[str, float]
    check_payload: Callable[[Mapping[str, Any]], None]
    description: str = ""


ACTION_TYPES: dict[str, ActionType] = {
    t.name: t
    for t in (
        ActionType(
            "sandbox.python",
            {"cpu": 1, "memory": 512},
            _check_sandbox,
            "Run payload.code with python3 in a bubblewrap sandbox without network.",
        ),
        ActionType(
            "sandbox.bash",
            {"cpu": 1, "memory": 256},
            _check_sandbox,
            "Run payload.code with bash in a bubblewrap sandbox without network.",
        ),
        ActionType(
            "reward.python",
            {"cpu": 1, "memory": 1024},
            _check_scorer,
            "Score payload.sample with score(samples) from payload.code; a batch's samples"
            " are scored in one sandboxed run (batch_key, batch_limit).",
        ),
        ActionType(
            "sleep",
            {"cpu": 1, "memory": 16},
            _check_sleep,
            "Sleep payload.seconds, then exit with payload.exit_code: synthetic load.",
        ),
    )
}


def is_resource_kind(name: str) -> bool:
    return name in RESOURCE_KINDS or (
        name.startswith(API_KIND_PREFIX) and len(name) > len(API_KIND_PREFIX)
    )
