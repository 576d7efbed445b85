"""The workload format as a JSON Schema: a misspelt key or a wrong type is an
error naming where it is, not a default taken silently or a traceback.

``fixtures/workloads/README.md`` documents each field; this is its checked form.
"""

from __future__ import annotations

from typing import Any

import jsonschema

_NUMBER = {"type": "number"}
_AT_LEAST_0 = {"type": "number", "minimum": 0}
_COUNT = {"type": "integer", "minimum": 1}
_RESOURCES = {"type": "object", "additionalProperties": _AT_LEAST_0}
#: A number (a constant) or a mapping; the keywords for each apply only to its type.
_DIST: dict[str, Any] = {
    "type": ["number", "object"],
    "minimum": 0,
    "properties": {
        "dist": {"enum": ["const", "uniform", "lognormal", "exponential"]},
        "value": _AT_LEAST_0,
        "low": _AT_LEAST_0,
        "high": _AT_LEAST_0,
        "mean": {"type": "number", "exclusiveMinimum": 0},
        "cv": _AT_LEAST_0,
    },
    "additionalProperties": False,
    "allOf": [
        {
            "if": {"properties": {"dist": {"const": "uniform"}}, "required": ["dist"]},
            "then": {"required": ["low", "high"]},
        },
        {
            "if": {
                "properties": {"dist": {"enum": ["lognormal", "exponential"]}},
                "required": ["dist"],
            },
            "then": {"required": ["mean"]},
        },
    ],
}
_ACTION = {
    "type": "object",
    "required": ["type", "executor", "demand", "duration_s"],
    "properties": {
        "type": {"type": "string", "minLength": 1},
        "executor": {"type": "string", "minLength": 1},
        "demand": _RESOURCES,
        "duration_s": _DIST,
        "weight": {"type": "number", "exclusiveMinimum": 0},
        "binding": {"enum": ["trajectory", "task"]},
        "elasticity": {
            "type": "object",
            "properties": {
                "min_units": _COUNT,
                "max_units": _COUNT,
                "parallel_fraction": {"type": "number", "minimum": 0, "maximum": 1},
                "unit_kind": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "setup_s": _AT_LEAST_0,
        "affinity": {"type": "array", "items": {"type": "string"}},
        "start_s": _AT_LEAST_0,
        "batch": {
            "type": "object",
            "properties": {"limit": _COUNT, "marginal": _AT_LEAST_0},
            "additionalProperties": False,
        },
        "priority": {"type": "integer"},
        "split_gpus_slowdown": {"type": "number", "minimum": 1},
        "may_split_gpus": {"type": "boolean"},
        "may_shrink_gpus": {"type": "boolean"},
        "shrink_gpus_s": _AT_LEAST_0,
        "hint_cv": _AT_LEAST_0,
        "remaining_hint_cv": _AT_LEAST_0,
    },
    "additionalProperties": False,
}
WORKLOAD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["pool", "tasks"],
    "properties": {
        "name": {"type": "string"},
        "seed": {"type": "integer"},
        "sim": {
            "type": "object",
            "properties": {"round_interval_s": _AT_LEAST_0},
            "additionalProperties": False,
        },
        "pool": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "capacity", "executors"],
                "properties": {
                    "name": {"type": "string"},
                    "count": {"type": "number", "exclusiveMinimum": 0},
                    "capacity": _RESOURCES,
                    "executors": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "gpu_groups": _COUNT,
                    "warm_slots": {"type": "integer", "minimum": 0},
                },
                "additionalProperties": False,
            },
        },
        "tenants": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "guaranteed": _RESOURCES,
                    "limit": _RESOURCES,
                    "weight": {"type": "number", "exclusiveMinimum": 0},
                    "lending_limit": _RESOURCES,
                },
                "additionalProperties": False,
            },
        },
        "tasks": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "steps", "trajectories", "turns"],
                "properties": {
                    "name": {"type": "string"},
                    "tenant": {"type": "string"},
                    "steps": _COUNT,
                    "trajectories": _COUNT,
                    "turns": _DIST,
                    "think_s": _DIST,
                    "actions": {"type": "array", "items": _ACTION},
                    "reward": _ACTION,
                    "train_s": _AT_LEAST_0,
                    "start_s": _AT_LEAST_0,
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}

_VALIDATOR = jsonschema.Draft202012Validator(WORKLOAD_SCHEMA)


def schema_error(raw: Any) -> str | None:
    """What is wrong with ``raw`` as a workload, at which field; None when nothing is.

    The most relevant error, with any others at the same field: a misspelt key
    is both an unexpected key and a missing one.
    """
    errors = list(_VALIDATOR.iter_errors(raw))
    best = jsonschema.exceptions.best_match(errors)
    if best is None:
        return None
    path = best.absolute_path
    messages = [best.message]
    messages += [e.message for e in errors if e.absolute_path == path and e is not best]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return f"{where.lstrip('.') or 'workload'}: {'; '.join(messages)}"
