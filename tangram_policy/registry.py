"""Policies by name, for settings (``TANGRAM_POLICY``) and the simulator.

``tangram`` is the full policy; each ``tangram-no-<mechanism>`` turns one
mechanism off, for ablations. ``tangram-no-aging`` orders by expected work
alone (``aging_rate`` 0), so a flood of short actions can hold a long one
back for ever: it is there to measure what bounded waits cost, not to run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from tangram_policy.fifo import FifoPolicy
from tangram_policy.tangram import TangramConfig, TangramPolicy
from tangram_policy.types import Policy

ABLATIONS = (
    "ordering",
    "fair_share",
    "affinity",
    "topology",
    "elastic",
    "batching",
    "shrinking",
    "growing",
    "learned_rest",
)


def _ablation(mechanism: str) -> Policy:
    config = replace(TangramConfig(), **{mechanism: False})
    return TangramPolicy(config, name=f"tangram-no-{mechanism.replace('_', '-')}")


POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": FifoPolicy,
    "tangram": TangramPolicy,
    **{f"tangram-no-{m.replace('_', '-')}": partial(_ablation, m) for m in ABLATIONS},
    "tangram-no-aging": partial(
        TangramPolicy, TangramConfig(aging_rate=0.0), name="tangram-no-aging"
    ),
}


def keeps_gpu_groups(name: str) -> bool:
    """Whether policy ``name`` keeps a multi-GPU action inside one NVLink group
    (unless the action says it may split): what an operator is told a queued one waits for."""
    policy = get_policy(name)
    return isinstance(policy, TangramPolicy) and policy.config.topology


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(POLICIES)}") from None
