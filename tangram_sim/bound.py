"""What no policy can beat on a workload: every action starting the moment it is
submitted, warm, on its most units, on a pool whose room is the only limit.

An action's ACT is at least its sandbox start plus its run on its most units
(Amdahl), whatever waits, setups or batches add. A step lasts at least its
longest trajectory's think times and such actions, and at least the
resource-seconds its actions hold of each kind over the pool's capacity of it
(they all run inside the step), plus the trainer's time. Resource-seconds are
counted at their least: the start and the run at minimum units for the unit
kind (Amdahl: more units never cost fewer unit-seconds), the run on the most
units for the other kinds, and a batchable call's share of a full batch.

Every policy replays the same trajectories (``draw_trajectory``), so these
floors bound every action-level policy's mean ACT and mean step on the
workload (not ``static``'s: it starts a sandbox once per trajectory).
``static``'s means over them bound any policy's ratios against ``static``, and
the smallest pool whose floors reach ``static``'s mean step bounds the
savings: where one of these is under a target, no scheduler meets it on that
workload.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tangram_policy.estimate import speedup
from tangram_sim.baselines import build_nodes
from tangram_sim.workload import ActionType, Workload, draw_trajectory


@dataclass(frozen=True, slots=True)
class StepFloor:
    """One step of one task: its longest trajectory without waits, the least
    resource-seconds its actions hold per kind, and the trainer's time."""

    chain_s: float
    train_s: float
    work: Mapping[str, float] = field(default_factory=dict)

    def on(self, capacity: Mapping[str, float]) -> float:
        """The shortest this step can be on a pool of ``capacity``."""
        longest = self.chain_s
        for kind, amount in self.work.items():
            if amount <= 0:
                continue
            room = capacity.get(kind, 0.0)
            if room <= 0:
                return math.inf
            longest = max(longest, amount / room)
        return longest + self.train_s


@dataclass(frozen=True, slots=True)
class Floor:
    """Sums over a run's actions and steps, so that seeds pool as the bench pools them."""

    act_s: float
    actions: int
    steps: tuple[StepFloor, ...]
    capacity: Mapping[str, float]

    @property
    def mean_act_s(self) -> float:
        return self.act_s / self.actions if self.actions else 0.0

    @property
    def mean_step_s(self) -> float:
        if not self.steps:
            return 0.0
        return sum(step.on(self.capacity) for step in self.steps) / len(self.steps)

    def __add__(self, other: Floor) -> Floor:
        return Floor(
            self.act_s + other.act_s,
            self.actions + other.actions,
            self.steps + other.steps,
            self.capacity,
        )


def capacity(workload: Workload) -> dict[str, float]:
    """The pool's capacity per kind, as the simulator builds its nodes."""
    total: dict[str, float] = {}
    for spec in build_nodes(workload, "tangram"):
        for kind, amount in spec.capacity.items():
            total[kind] = total.get(kind, 0.0) + amount
    return total


def action_floor_s(action: ActionType, run_s: float) -> float:
    """The shortest ACT of an action that runs ``run_s`` at its minimum units."""
    return action.start_s + run_s / speedup(action.elasticity, action.elasticity.max_units)


def _hold(action: ActionType, run_s: float, work: dict[str, float]) -> None:
    """Add the least resource-seconds of kind the action holds to ``work``."""
    elasticity = action.elasticity
    fastest_s = run_s / speedup(elasticity, elasticity.max_units)
    if action.batch_limit > 1:  # one demand for a whole batch of the limit, at best
        marginal = min(max(action.batch_marginal, 0.0), 1.0)
        limit = action.batch_limit
        held_s = action.start_s / limit + fastest_s * ((1.0 - marginal) / limit + marginal)
        for kind, amount in action.demand.items():
            work[kind] = work.get(kind, 0.0) + amount * held_s
        return
    elastic = elasticity.max_units > elasticity.min_units
    for kind, amount in action.demand.items():
        slowest = elastic and kind == elasticity.unit_kind
        held_s = action.start_s + (run_s if slowest else fastest_s)
        work[kind] = work.get(kind, 0.0) + amount * held_s


def no_wait_floor(workload: Workload) -> Floor:
    """The floors of ``workload`` at its seed (see the module)."""
    act_s = 0.0
    actions = 0
    steps: list[StepFloor] = []
    for task in workload.tasks:
        for step in range(task.steps):
            longest = 0.0
            work: dict[str, float] = {}
            for index in range(task.trajectories):
                turns, reward_s = draw_trajectory(workload.seed, task, step, index)
                calls = [(action, run_s) for _, action, run_s in turns]
                if task.reward is not None and reward_s >= 0:
                    calls.append((task.reward, reward_s))
                trajectory_s = sum(think_s for think_s, _, _ in turns)
                for action, run_s in calls:
                    floor_s = action_floor_s(action, run_s)
                    trajectory_s += floor_s
                    act_s += floor_s
                    actions += 1
                    _hold(action, run_s, work)
                longest = max(longest, trajectory_s)
            steps.append(StepFloor(longest, task.train_s, work))
    return Floor(act_s, actions, tuple(steps), capacity(workload))


def savings_bound(
    workload: Workload, floors: Sequence[Floor], target_step_s: float, *, iterations: int = 40
) -> float:
    """The most savings (percent, over cpu, gpu and API kinds) any policy could have at
    ``target_step_s``: the pool ``Workload.scaled`` by the largest factor whose
    floors' mean step (pooled over ``floors``, one per seed) is still over it."""
    steps = tuple(step for floor in floors for step in floor.steps)

    def mean_on(factor: float) -> float:
        room = capacity(workload.scaled(factor))
        return sum(step.on(room) for step in steps) / len(steps) if steps else 0.0

    low, high = 0.0, 1.0
    if mean_on(high) > target_step_s:
        return 0.0
    for _ in range(iterations):
        middle = (low + high) / 2.0
        if mean_on(middle) <= target_step_s:
            high = middle
        else:
            low = middle
    return saving_pct(capacity(workload), capacity(workload.scaled(low)))


def saving_pct(
    full: Mapping[str, float], small: Mapping[str, float], *, default: float = 0.0
) -> float:
    """The headline saving of ``small`` against ``full``: the least over every kind
    but memory (``default`` where the pool has no other)."""
    by_kind = [
        100.0 * (1.0 - small.get(kind, 0.0) / amount)
        for kind, amount in full.items()
        if amount > 0 and kind not in ("memory", "gpu_memory")
    ]
    return min(by_kind, default=default)
