"""Policies by name, for settings (``TANGRAM_POLICY``) and the simulator."""

from __future__ import annotations

from collections.abc import Callable

from tangram_policy.fifo import FifoPolicy
from tangram_policy.types import Policy

POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": FifoPolicy,
}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(POLICIES)}") from None
