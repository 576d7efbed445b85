"""The pool each policy sees, and the baselines that are not per-round policies.

- ``static``: each trajectory holds a sandbox (its largest trajectory-bound
  demand, minimum units) from its start to its end, also while the LLM thinks;
  a trajectory that finds none waits (FIFO) and that wait counts in its first
  action's ACT. The sandboxes of all tasks share the sandbox nodes first come,
  first served (kinder to ``static`` than a pool per task). Task-bound work
  (reward GPUs, API quota) runs FIFO on a fixed per-task share of the pool; on
  a node group that also hosts sandboxes, the sandboxes get a share too, by
  what static provisioning holds (trajectories x sandbox x expected life).
  No elasticity, no batching, no affinity choice.
- ``partitioned``: action-level FIFO queues, but each task only on its own
  fixed share of every node group it uses; minimum units.
- ``fifo``: one shared action-level FIFO queue (``tangram_policy.fifo``).
- ``tangram`` and its ablations: ``tangram_policy.registry``.

Shares are proportional to each party's expected demand on the group (actions
per step x mean duration x primary demand). A group with at least as many
nodes as tasks is split by whole nodes (largest remainder, at least one each);
otherwise every node's capacity is split (GPUs whole), and a party whose
parts would hold none of its largest actions gets the room it lacks from the
others' spare (a fixed share too small for one action would never run it).
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


def _sandbox_load(task: Task, types: list[ActionType]) -> float:
    """What ``static`` provisions for a task's sandboxes: one per trajectory, held
    for the trajectory's expected life (think time and actions, turn after turn)."""
    bound = [a for a in types if a.binding == "trajectory"]
    if not bound:
        return 0.0
    turns = task.turns.expected() if task.actions else 0.0
    total_weight = sum(a.weight for a in task.actions) or 1.0
    action_s = sum(a.weight * a.duration_s.expected() for a in task.actions) / total_weight
    life_s = turns * (task.think_s.expected() + action_s)
    if task.reward is not None:
        life_s += task.reward.duration_s.expected()
    demand = max(max(a.demand.get(primary_kind(a.demand), 0.0) for a in bound), 1e-3)
    return task.trajectories * demand * max(life_s, 1e-3)


def _parties(
    workload: Workload, group: NodeGroup, policy: str
) -> dict[str, tuple[frozenset[str], float]]:
    """Who gets a fixed share of ``group``: party -> (executors, weight)."""
    users: dict[str, tuple[Task, list[ActionType]]] = {}
    for task in workload.tasks:
        types = [a for a in task.types if a.executor in group.executors]
        if types:
            users[task.name] = (task, types)
    if policy == "partitioned":
        return {
            name: (frozenset(a.id for a in types), _expected_load(task, group, types))
            for name, (task, types) in users.items()
        }
    if policy != "static":
        return {"": (frozenset(a.id for _, types in users.values() for a in types), 1.0)}
    # static: the sandboxes of all tasks share one part (first come, first served);
    # each task's task-bound work (reward GPUs, API quota) has its own part.
    parties: dict[str, tuple[frozenset[str], float]] = {}
    sandbox_types: set[str] = set()
    sandbox_weight = 0.0
    for name, (task, types) in users.items():
        bound = [a for a in types if a.binding == "trajectory"]
        if bound:
            sandbox_types |= {a.id for a in bound} | {f"{name}.{LEASE_SUFFIX}"}
            sandbox_weight += _sandbox_load(task, types)
        own = [a for a in types if a.binding == "task"]
        if own:
            parties[name] = (frozenset(a.id for a in own), _expected_load(task, group, own))
    if sandbox_types:
        parties["sandboxes"] = (frozenset(sandbox_types), sandbox_weight)
    return parties


def build_nodes(workload: Workload, policy: str) -> list[SimNodeSpec]:
    specs: list[SimNodeSpec] = []
    for group in workload.pool:
        nodes = _group_nodes(group)
        parties = _parties(workload, group, policy)
        if len(parties) <= 1:
            executors = next(iter(parties.values()))[0] if parties else frozenset()
            for node_id, capacity in nodes:
                specs.append(_spec(node_id, capacity, executors, group))
            continue
        weights = {name: weight for name, (_, weight) in parties.items()}
        if len(nodes) >= len(parties):
            counts = _shares(weights, len(nodes), 1)
            position = 0
            for name in sorted(parties):
                for node_id, capacity in nodes[position : position + counts[name]]:
                    specs.append(_spec(node_id, capacity, parties[name][0], group))
                position += counts[name]
            continue
        total = sum(weights.values()) or 1.0
        split: list[dict[str, dict[str, float]]] = []
        for _, capacity in nodes:
            parts: dict[str, dict[str, float]] = {name: {} for name in parties}
            for kind, amount in capacity.items():
                if kind == "gpu" or kind.startswith("api:"):
                    whole = _shares(weights, int(amount), 0)
                    for name in parties:
                        parts[name][kind] = float(whole[name])
                else:
                    for name in parties:
                        parts[name][kind] = amount * weights[name] / total
            split.append(parts)
        demands = _demands(workload)
        _make_room(split, {name: [demands[t] for t in ids] for name, (ids, _) in parties.items()})
        for (node_id, _), parts in zip(nodes, split, strict=True):
            for name in sorted(parties):
                specs.append(_spec(f"{node_id}/{name}", parts[name], parties[name][0], group))
    return specs


def _demands(workload: Workload) -> dict[str, Mapping[str, float]]:
    """Each action type's demand at its minimum units; a static lease's, its largest."""
    out: dict[str, Mapping[str, float]] = {}
    for task in workload.tasks:
        lease: dict[str, float] = {}
        for action in task.types:
            out[action.id] = action.demand
            if action.binding == "trajectory":
                for kind, amount in action.demand.items():
                    lease[kind] = max(lease.get(kind, 0.0), amount)
        out[f"{task.name}.{LEASE_SUFFIX}"] = lease
    return out


def _fits(demand: Mapping[str, float], room: Mapping[str, float]) -> bool:
    return all(amount <= room.get(kind, 0.0) + 1e-9 for kind, amount in demand.items())


def _make_room(
    split: list[dict[str, dict[str, float]]], needs: Mapping[str, list[Mapping[str, float]]]
) -> None:
    """Give a party whose parts fit one of its actions nowhere the room it lacks, on the
    node where it lacks least, out of what the other parties there hold beyond their
    own largest actions. A fixed share smaller than a task's action would leave
    that task stuck forever; no operator would provision one so, and proportional
    shares of a small node do (a light task next to a heavy one)."""
    largest: dict[str, dict[str, float]] = {party: {} for party in needs}
    for party, demands in needs.items():
        for demand in demands:
            for kind, amount in demand.items():
                largest[party][kind] = max(largest[party].get(kind, 0.0), amount)
    for party in sorted(needs):
        for demand in needs[party]:
            if any(_fits(demand, parts[party]) for parts in split):
                continue
            parts = min(
                split,
                key=lambda p: sum(max(a - p[party].get(k, 0.0), 0.0) for k, a in demand.items()),
            )
            for kind, amount in demand.items():
                lack = amount - parts[party].get(kind, 0.0)
                for other in sorted(parts):
                    if other == party or lack <= 1e-9:
                        continue
                    spare = parts[other].get(kind, 0.0) - largest[other].get(kind, 0.0)
                    give = min(max(spare, 0.0), lack)
                    parts[other][kind] = parts[other].get(kind, 0.0) - give
                    parts[party][kind] = parts[party].get(kind, 0.0) + give
                    lack -= give


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
