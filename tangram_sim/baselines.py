"""The pool each policy sees, and the baselines that are not per-round policies.

- ``static``: each trajectory holds a sandbox (its largest trajectory-bound
  demand, minimum units) from its start to its end, also while the LLM thinks;
  a trajectory that finds none waits (FIFO) and that wait counts in its first
  action's ACT. Task-bound work (reward GPUs, API quota) runs FIFO on a fixed
  per-task share of the pool. No elasticity, no batching, no affinity choice.
- ``partitioned``: action-level FIFO queues, but each task only on its own
  fixed share of every node group it uses; minimum units.
- ``fifo``: one shared action-level FIFO queue (``tangram_policy.fifo``).
- ``tangram`` and its ablations: ``tangram_policy.registry``.

Shares are proportional to each task's expected demand on the group (actions
per step x mean duration x primary demand). A group with at least as many
nodes as tasks is split by whole nodes (largest remainder, at least one each);
otherwise every node's capacity is split (GPUs whole).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tangram_policy.pool import primary_kind
from tangram_sim.workload import ActionType, NodeGroup, Task, Workload

#: The static baseline's per-trajectory sandbox lease is the type ``<task>.sandbox``.
LEASE_SUFFIX = "sandbox"


@dataclass(frozen=True, slots=True)
class SimNodeSpec:
    id: str
    capacity: Mapping[str, float]
    executors: frozenset[str]
    gpu_groups: tuple[tuple[str, ...], ...] = ()
    warm_slots: int = 4
    #: The node group (or partition) it belongs to: nodes of a group are alike.
    group: str = ""


def _gpu_groups(node_id: str, gpus: int, groups: int) -> tuple[tuple[str, ...], ...]:
    if gpus <= 0:
        return ()
    groups = max(1, min(groups, gpus))
    size = math.ceil(gpus / groups)
    ids = [f"{node_id}:gpu{i}" for i in range(gpus)]
    return tuple(tuple(ids[i : i + size]) for i in range(0, gpus, size))


def _group_nodes(group: NodeGroup) -> list[tuple[str, dict[str, float]]]:
    """A group's nodes: ``floor(count)`` whole ones, then one holding the fraction left."""
    whole = int(math.floor(group.count + 1e-9))
    out = [(f"{group.name}-{i}", dict(group.capacity)) for i in range(whole)]
    fraction = group.count - whole
    if fraction > 1e-6:
        partial = {
            kind: (math.ceil(amount * fraction - 1e-9) if kind == "gpu" else amount * fraction)
            for kind, amount in group.capacity.items()
        }
        out.append((f"{group.name}-{whole}", partial))
    return out


def _task_types(task: Task) -> list[ActionType]:
    return [*task.actions, *([task.reward] if task.reward else [])]


def _expected_load(task: Task, group: NodeGroup, types: list[ActionType]) -> float:
    turns = task.turns.expected() if task.actions else 0.0
    total_weight = sum(a.weight for a in task.actions) or 1.0
    load = 0.0
    for action in types:
        if action.executor not in group.executors:
            continue
        per_step = 1.0 if action is task.reward else turns * action.weight / total_weight
        kind = primary_kind(action.demand)
        load += per_step * action.duration_s.expected() * max(action.demand.get(kind, 0.0), 1e-3)
    return load * task.trajectories


def _shares(weights: dict[str, float], count: int, minimum: int) -> dict[str, int]:
    total = sum(weights.values()) or 1.0
    ideal = {t: count * w / total for t, w in weights.items()}
    out = {t: max(minimum, int(math.floor(v))) for t, v in ideal.items()}
    left = count - sum(out.values())
    for task in sorted(ideal, key=lambda t: (-(ideal[t] - math.floor(ideal[t])), t)):
        if left <= 0:
            break
        out[task] += 1
        left -= 1
    while sum(out.values()) > count:  # minimums overshot: take from the largest
        largest = max(out, key=lambda t: (out[t], t))
        out[largest] -= 1
    return out


def build_nodes(workload: Workload, policy: str) -> list[SimNodeSpec]:
    partition_all = policy == "partitioned"
    static = policy == "static"
    specs: list[SimNodeSpec] = []
    for group in workload.pool:
        nodes = _group_nodes(group)
        users: dict[str, list[ActionType]] = {}
        for task in workload.tasks:
            types = [a for a in _task_types(task) if a.executor in group.executors]
            if types:
                users[task.name] = types
        bindings = {a.binding for types in users.values() for a in types}
        if static and len(bindings) > 1:
            raise ValueError(
                f"static: node group {group.name!r} runs both sandboxes and task-bound work; "
                "give task-bound executors (reward, api) their own node group"
            )
        split = partition_all or (
            static and any(a.binding == "task" for types in users.values() for a in types)
        )
        if not split or len(users) <= 1:
            executors = frozenset(a.id for types in users.values() for a in types)
            if static:
                executors |= {
                    f"{task}.{LEASE_SUFFIX}"
                    for task, types in users.items()
                    if any(a.binding == "trajectory" for a in types)
                }
            for node_id, capacity in nodes:
                specs.append(_spec(node_id, capacity, executors, group))
            continue
        tasks_by_name = {t.name: t for t in workload.tasks}
        weights = {
            name: _expected_load(tasks_by_name[name], group, types) for name, types in users.items()
        }

        def executors_of(name: str, types: list[ActionType]) -> frozenset[str]:
            ids = {a.id for a in types}
            if static and any(a.binding == "trajectory" for a in types):
                ids.add(f"{name}.{LEASE_SUFFIX}")
            return frozenset(ids)

        if len(nodes) >= len(users):
            counts = _shares(weights, len(nodes), 1)
            position = 0
            for name in sorted(users):
                for node_id, capacity in nodes[position : position + counts[name]]:
                    specs.append(_spec(node_id, capacity, executors_of(name, users[name]), group))
                position += counts[name]
            continue
        for node_id, capacity in nodes:
            parts: dict[str, dict[str, float]] = {name: {} for name in users}
            for kind, amount in capacity.items():
                if kind == "gpu" or kind.startswith("api:"):
                    whole = _shares(weights, int(amount), 0)
                    for name in users:
                        parts[name][kind] = float(whole[name])
                else:
                    total = sum(weights.values()) or 1.0
                    for name in users:
                        parts[name][kind] = amount * weights[name] / total
            for name in sorted(users):
                specs.append(
                    _spec(f"{node_id}/{name}", parts[name], executors_of(name, users[name]), group)
                )
    return specs


def _spec(
    node_id: str, capacity: Mapping[str, float], executors: frozenset[str], group: NodeGroup
) -> SimNodeSpec:
    return SimNodeSpec(
        id=node_id,
        capacity=dict(capacity),
        executors=executors,
        gpu_groups=_gpu_groups(node_id, int(capacity.get("gpu", 0)), group.gpu_groups),
        warm_slots=group.warm_slots,
        group=f"{group.name}:{','.join(sorted(executors))}:{sorted(capacity.items())}",
    )
