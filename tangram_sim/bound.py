"""What no policy can beat on a workload: every action starting the moment it is
submitted, on its most units, with only what no scheduler avoids: a model or
image no node has yet, and the queue for the pool's capacity.

An action's ACT is at least its sandbox start plus its run on its most units
(Amdahl), whatever waits, setups or batches add. A trajectory's ACTs sum to its
end less its think time, and it ends no sooner than:

- its actions back to back after their thinks, where, in a task's first step,
  an action whose affinity key only that task uses starts no sooner than the
  key's setup after the first such action could be submitted (no node holds
  it before); nor
- per resource kind, the end of its last action holding the kind plus what
  follows, where the trajectories' work of the kind, as one job each (from
  its first such action's start), completes no sooner, sorted, than under
  SRPT on one machine as fast as the pool's capacity of the kind (which no
  schedule beats at completing jobs by any time); nor the same for the work
  of the kind its actions of one executor hold, on the capacity of the nodes
  that run that executor, where those are not the whole pool.

A step lasts at least its longest trajectory so bounded, and at least the
resource-seconds its actions hold of each kind over the pool's capacity of it
(and those of an executor's actions over its nodes' capacity),
plus the trainer's time. And tasks share the pool (a step alone would have it
all): the lengths of their runs (a run is its steps back to back from the
task's start) sum to at least what, per kind, each run's work as one job (from
its first such action's earliest start) gives when the jobs complete no sooner,
sorted, than under SRPT on one machine as fast as the pool, each run lasting
past its job at least its last step's trainer and what follows that step's
last such action. Resource-seconds are counted at their least: the start
and the run at minimum units for the unit kind (Amdahl: more units never cost
fewer unit-seconds), the run on the most units for the other kinds, and a
batchable call's share of a full batch.

Every policy replays the same trajectories (``draw_trajectory``), so these
floors bound every action-level policy's mean ACT and mean step on the
workload (not ``static``'s: it starts a sandbox once per trajectory).
``static``'s means over them bound any policy's ratios against ``static``, and
the smallest pool whose floors reach ``static``'s mean step bounds the
savings: where one of these is under a target, no scheduler meets it on that
workload.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tangram_policy.estimate import speedup
from tangram_sim.baselines import SimNodeSpec, build_nodes
from tangram_sim.workload import ActionType, Task, Workload, draw_trajectory


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
class TaskFloor:
    """One task's run: its steps' floors and, per kind, what its steps' actions
    hold over the whole run: the least resource-seconds, the earliest any can
    start, and the least time the run goes on after the last one ends."""

    start_s: float
    steps: tuple[StepFloor, ...]
    work: Mapping[str, float] = field(default_factory=dict)
    release_s: Mapping[str, float] = field(default_factory=dict)
    tail_s: Mapping[str, float] = field(default_factory=dict)

    def on(self, capacity: Mapping[str, float]) -> float:
        """The shortest this task's run can be on a pool of ``capacity`` it had alone."""
        return sum(step.on(capacity) for step in self.steps)


def _tasks_floor_s(tasks: Sequence[TaskFloor], capacity: Mapping[str, float]) -> float:
    """The least sum of ``tasks``' run times (their steps' durations) when they share
    a pool of ``capacity``: each no shorter than alone (``TaskFloor.on``), and per
    kind, their runs' work, as one job each, completing no sooner, sorted, than
    under SRPT on one machine as fast as the pool's capacity of the kind."""
    alone = [task.on(capacity) for task in tasks]
    best = sum(alone)
    if math.isinf(best):
        return best
    for kind, room in capacity.items():
        holding = [
            (task, own)
            for task, own in zip(tasks, alone, strict=True)
            if task.work.get(kind, 0.0) > 0
        ]
        if room <= 0 or not holding:
            continue
        done = srpt_completions(
            [(task.release_s[kind], task.work[kind] / room) for task, _ in holding]
        )
        # End >= tail + max(completion, end alone - tail): pair both sorted.
        rest = sorted(task.start_s + own - task.tail_s[kind] for task, own in holding)
        ends = sum(task.tail_s[kind] for task, _ in holding) + sum(
            max(a, b) for a, b in zip(done, rest, strict=True)
        )
        shared = ends - sum(task.start_s for task, _ in holding)
        best = max(best, sum(alone) - sum(own for _, own in holding) + shared)
    return best


@dataclass(frozen=True, slots=True)
class Floor:
    """Sums over a run's actions and its tasks' steps, so that seeds pool as the
    bench pools them (each seed's tasks share its pool, not another seed's)."""

    act_s: float
    actions: int
    #: One per simulated run (a seed): its tasks.
    runs: tuple[tuple[TaskFloor, ...], ...]
    capacity: Mapping[str, float]

    @property
    def steps(self) -> tuple[StepFloor, ...]:
        return tuple(step for run in self.runs for task in run for step in task.steps)

    @property
    def mean_act_s(self) -> float:
        return self.act_s / self.actions if self.actions else 0.0

    @property
    def mean_step_s(self) -> float:
        return self.mean_step_on(self.capacity)

    def mean_step_on(self, capacity: Mapping[str, float]) -> float:
        """The least mean step on a pool of ``capacity``."""
        count = len(self.steps)
        if not count:
            return 0.0
        return sum(_tasks_floor_s(tasks, capacity) for tasks in self.runs) / count

    def __add__(self, other: Floor) -> Floor:
        return Floor(
            self.act_s + other.act_s,
            self.actions + other.actions,
            self.runs + other.runs,
            self.capacity,
        )


def capacity(workload: Workload) -> dict[str, float]:
    """The pool's capacity per kind, as the simulator builds its nodes."""
    return _total(build_nodes(workload, "tangram"))


def _total(specs: Sequence[SimNodeSpec]) -> dict[str, float]:
    total: dict[str, float] = {}
    for spec in specs:
        for kind, amount in spec.capacity.items():
            total[kind] = total.get(kind, 0.0) + amount
    return total


def rooms(workload: Workload) -> tuple[dict[str, float], dict[str, str]]:
    """What the floors count a queue for: each kind over the whole pool, and each
    kind over the nodes an executor runs on where those are not all of them (key
    ``kind@executor+executor``, the executors that run on just those nodes: their
    actions can use no other node's room); and per such executor, its key's part."""
    specs = build_nodes(workload, "tangram")
    nodes_of: dict[str, frozenset[str]] = {}
    for action in workload.action_types().values():
        nodes_of[action.executor] = frozenset(s.id for s in specs if action.id in s.executors)
    sharing: dict[frozenset[str], list[str]] = {}
    for executor, nodes in sorted(nodes_of.items()):
        if len(nodes) < len(specs):
            sharing.setdefault(nodes, []).append(executor)
    rooms = _total(specs)
    where: dict[str, str] = {}
    for nodes, executors in sharing.items():
        part = "+".join(executors)
        for executor in executors:
            where[executor] = part
        for kind, amount in _total([spec for spec in specs if spec.id in nodes]).items():
            rooms[f"{kind}@{part}"] = amount
    return rooms, where


def action_floor_s(action: ActionType, run_s: float) -> float:
    """The shortest ACT of an action that runs ``run_s`` at its minimum units."""
    return action.start_s + run_s / speedup(action.elasticity, action.elasticity.max_units)


def _hold(action: ActionType, run_s: float, work: dict[str, float]) -> None:
    """Add the least resource-seconds of each kind the action holds to ``work``.

    Of its unit kind, an elastic action holds the least at its minimum units
    (Amdahl); of the others, the least on its most units, the fastest run.
    """
    elasticity = action.elasticity
    fastest_s = run_s / speedup(elasticity, elasticity.max_units)
    elastic = elasticity.max_units > elasticity.min_units
    limit = max(action.batch_limit, 1)
    marginal = min(max(action.batch_marginal, 0.0), 1.0) if limit > 1 else 1.0
    # A batch member's share of a full batch: one start, and of the run the
    # marginal of its own plus an even part of the rest of the longest.
    share = (1.0 - marginal) / limit + marginal
    for kind, amount in action.demand.items():
        slowest = elastic and kind == elasticity.unit_kind
        held_s = action.start_s / limit + (run_s if slowest else fastest_s) * share
        work[kind] = work.get(kind, 0.0) + amount * held_s


def srpt_completions(jobs: Sequence[tuple[float, float]]) -> list[float]:
    """When each of ``jobs`` (release, processing) ends under preemptive shortest
    remaining processing time first on one machine, ascending. No schedule of them
    on that machine completes more of them by any time (Schrage, 1968)."""
    pending = sorted(jobs)
    left: list[float] = []
    done: list[float] = []
    now = 0.0
    index = 0
    while index < len(pending) or left:
        if not left:
            now = max(now, pending[index][0])
        while index < len(pending) and pending[index][0] <= now:
            heapq.heappush(left, pending[index][1])
            index += 1
        shortest = heapq.heappop(left)
        release = pending[index][0] if index < len(pending) else math.inf
        if now + shortest <= release:
            now += shortest
            done.append(now)
        else:
            heapq.heappush(left, shortest - (release - now))
            now = release
    return done


@dataclass(slots=True)
class _Trajectory:
    """One trajectory without waits, from its step's start: when it ends, its
    think time, and per kind its least resource-seconds, when the first action
    holding the kind can start, and how long after the last one's end it ends."""

    end_s: float
    think_s: float
    work: dict[str, float] = field(default_factory=dict)
    release_s: dict[str, float] = field(default_factory=dict)
    tail_s: dict[str, float] = field(default_factory=dict)


def _set_up_by(task: Task, workload: Workload) -> dict[str, float]:
    """Per affinity key only ``task`` uses, the least setup any of its types takes
    with it: no node has it before one of the task's actions asks for it."""
    others = {
        key
        for other in workload.tasks
        if other is not task
        for action in other.types
        for key in action.affinity
    }
    setup: dict[str, float] = {}
    for action in task.types:
        for key in action.affinity - others:
            setup[key] = min(setup.get(key, math.inf), action.setup_s)
    return {key: seconds for key, seconds in setup.items() if seconds > 0}


def _trajectory(
    calls: list[tuple[float, ActionType, float]],
    ready: Mapping[str, float],
    where: Mapping[str, str],
) -> _Trajectory:
    """``calls`` (think, action, run s) without waits but for setups: an action with a
    key in ``ready`` starts no sooner than then, and what follows it later as much.
    (A wait earlier in the trajectory only submits it later, so the least it adds
    to the trajectory is the most any one action would wait for its setup.)"""
    now = 0.0  # with the setups' waits
    bare = 0.0  # without them: what follows an action takes at least this much more
    trajectory = _Trajectory(0.0, 0.0)
    ends: dict[str, float] = {}
    for think, action, run_s in calls:
        now += think
        bare += think
        trajectory.think_s += think
        start = max([now, *(ready[key] for key in action.affinity if key in ready)])
        floor_s = action_floor_s(action, run_s)
        now = start + floor_s
        bare += floor_s
        held: dict[str, float] = {}
        _hold(action, run_s, held)
        part = where.get(action.executor)
        for kind, amount in held.items():
            if amount > 0:
                for key in (kind, f"{kind}@{part}") if part else (kind,):
                    trajectory.work[key] = trajectory.work.get(key, 0.0) + amount
                    trajectory.release_s.setdefault(key, start)
                    ends[key] = bare
    trajectory.end_s = now
    trajectory.tail_s = {kind: bare - end for kind, end in ends.items()}
    return trajectory


def _setups_done(
    plans: list[list[tuple[float, ActionType, float]]], setups: Mapping[str, float]
) -> dict[str, float]:
    """When each key of ``setups`` is first ready in a task's first step: its first
    action's submit without waits, plus the key's setup."""
    ready: dict[str, float] = {}
    for calls in plans:
        now = 0.0
        for think, action, run_s in calls:
            now += think
            for key in action.affinity:
                if key in setups:
                    ready[key] = min(ready.get(key, math.inf), now + setups[key])
            now += action_floor_s(action, run_s)
    return ready


def _queued_act_s(trajectories: list[_Trajectory], capacity: Mapping[str, float]) -> float:
    """The least sum of ACTs of one step's trajectories, counting queues.

    A trajectory's ACTs sum to its end less its think time. It ends no sooner
    than without waits; nor, for each kind, than its last action holding the
    kind plus what follows it. No schedule completes more trajectories' work of
    a kind by any time than SRPT on one machine as fast as the pool's capacity
    of the kind, so matching those completions, sorted, to the trajectories'
    other bounds, sorted too, bounds the sum of their ends.
    """
    ends = sum(t.end_s for t in trajectories)
    best = ends
    for kind, room in capacity.items():
        holding = [t for t in trajectories if t.work.get(kind, 0.0) > 0]
        if room <= 0 or not holding:
            continue
        done = srpt_completions([(t.release_s[kind], t.work[kind] / room) for t in holding])
        # End >= tail + max(completion, floor end - tail): pair both sorted.
        rest = sorted(t.end_s - t.tail_s[kind] for t in holding)
        tails = sum(t.tail_s[kind] for t in holding)
        queued = tails + sum(max(a, b) for a, b in zip(done, rest, strict=True))
        best = max(best, ends - sum(t.end_s for t in holding) + queued)
    return best - sum(t.think_s for t in trajectories)


def no_wait_floor(workload: Workload) -> Floor:
    """The floors of ``workload`` at its seed (see the module)."""
    room, where = rooms(workload)
    act_s = 0.0
    actions = 0
    tasks: list[TaskFloor] = []
    for task in workload.tasks:
        setups = _set_up_by(task, workload)
        steps: list[StepFloor] = []
        total: dict[str, float] = {}
        release: dict[str, float] = {}
        tail: dict[str, float] = {}
        for step in range(task.steps):
            plans = []
            for index in range(task.trajectories):
                turns, reward_s = draw_trajectory(workload.seed, task, step, index)
                calls = list(turns)
                if task.reward is not None and reward_s >= 0:
                    calls.append((0.0, task.reward, reward_s))
                plans.append(calls)
            ready = _setups_done(plans, setups) if step == 0 and setups else {}
            trajectories = [_trajectory(calls, ready, where) for calls in plans]
            actions += sum(len(calls) for calls in plans)
            act_s += _queued_act_s(trajectories, room)
            work: dict[str, float] = {}
            for trajectory in trajectories:
                for kind, amount in trajectory.work.items():
                    work[kind] = work.get(kind, 0.0) + amount
                    if step == 0:
                        first = task.start_s + trajectory.release_s[kind]
                        release[kind] = min(release.get(kind, math.inf), first)
            for kind, amount in work.items():
                total[kind] = total.get(kind, 0.0) + amount
                release.setdefault(kind, task.start_s)
                # The run ends no sooner than the last step's trainer after
                # the kind's last action, and what follows it in its trajectory.
                tail[kind] = task.train_s + min(
                    (t.tail_s[kind] for t in trajectories if kind in t.tail_s), default=0.0
                )
            longest = max((t.end_s for t in trajectories), default=0.0)
            steps.append(StepFloor(longest, task.train_s, work))
        tasks.append(TaskFloor(task.start_s, tuple(steps), total, release, tail))
    return Floor(act_s, actions, (tuple(tasks),), room)


def savings_bound(
    workload: Workload, floors: Sequence[Floor], target_step_s: float, *, iterations: int = 40
) -> float:
    """The most savings (percent, over cpu, gpu and API kinds) any policy could have at
    ``target_step_s``: the pool ``Workload.scaled`` by the largest factor whose
    floors' mean step (pooled over ``floors``, one per seed) is still over it."""
    pooled = sum(floors[1:], floors[0]) if floors else None

    def mean_on(factor: float) -> float:
        room, _ = rooms(workload.scaled(factor))
        return pooled.mean_step_on(room) if pooled is not None else 0.0

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
