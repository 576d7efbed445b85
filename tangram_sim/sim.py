"""A discrete-event simulator that replays an agentic-RL workload through a policy.

Each task runs synchronous RL steps: a step starts all its trajectories; a
trajectory alternates LLM think time and one action per turn, then makes a
final reward call; the step ends when its last trajectory does, plus the
trainer's time. Every action's submit, start and finish and every step's
duration are recorded, and per tenant how much of its guarantee it asked
for while others held it (``SimResult.shortfall``).

Policies: any name from ``tangram_policy.registry`` drives one shared
action-level queue; two baselines reshape the pool first (see
``tangram_sim.baselines``): ``partitioned`` (each task its fixed share, FIFO
inside it) and ``static`` (each trajectory holds a sandbox for its whole life,
task-bound work on per-task shares).

The policy is called only when something changed (a submit or a finish), at
most once per ``round_interval_s``, while actions wait or running ones could
grow, with the nodes that have room and offer a pending type, their free room
as capacity, and per-tenant usage; and the running elastic actions whose
cores can change (with their nodes), which it may shrink or grow: the rest of
such a run goes at the speed of its new units. What it learns is what a live
scheduler sees: a finished action's run time, and of a batch only its members
and run time (``Snapshot.batch_stats``), not each member's.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tangram_policy.estimate import (
    batch_update,
    decayed_mean,
    observed_work,
    speedup,
    stat_update,
    trajectory_update,
    type_priors,
    work_at_min_units,
)
from tangram_policy.pool import gpu_group_positions, gpu_group_size, primary_kind, take_gpus
from tangram_policy.registry import get_policy
from tangram_policy.types import (
    EPSILON,
    RESIZABLE_KINDS,
    BatchStat,
    DurationStat,
    Elasticity,
    Node,
    PendingAction,
    Placement,
    Policy,
    Resizable,
    Resize,
    Resources,
    RunningAction,
    Snapshot,
    TrajectoryStat,
    TypeLoad,
)
from tangram_sim.baselines import LEASE_SUFFIX, SimNodeSpec, build_nodes
from tangram_sim.workload import ActionType, Dist, Task, Workload, draw_trajectory

BASELINES = ("static", "partitioned")
#: Above this many nodes with room, a round sees only the nodes it could use.
FULL_VIEW_NODES = 512


class PolicyError(RuntimeError):
    """A policy returned a placement that breaks capacity, a limit or a type, or
    names a GPU another action holds."""


class _Node:
    __slots__ = (
        "id",
        "executors",
        "capacity",
        "free",
        "warm",
        "warm_slots",
        "gpu_groups",
        "gpu_free",
        "view",
        "group",
        "order",
        "idle",
        "setting_up",
    )

    def __init__(self, spec: SimNodeSpec, order: int) -> None:
        self.id = spec.id
        self.group = spec.group
        self.order = order
        self.idle = True
        self.executors = spec.executors
        self.capacity = dict(spec.capacity)
        self.free = dict(spec.capacity)
        #: Warm keys (images, models) with the time each is (or will be) ready, LRU order.
        self.warm: OrderedDict[str, float] = OrderedDict()
        self.warm_slots = spec.warm_slots
        self.gpu_groups = spec.gpu_groups
        self.gpu_free: list[list[str]] = [list(g) for g in spec.gpu_groups]
        self.view: Node | None = None
        #: Keys of ``warm`` whose setup has not ended yet.
        self.setting_up: set[str] = set()

    def free_gpus(self, gpus: tuple[str, ...]) -> None:
        """Put ``gpus`` back among the free ones, each in its group."""
        positions = gpu_group_positions(self.gpu_groups, gpus)
        assert positions is not None, f"{self.id} has no GPU among {gpus}"
        for gpu, position in zip(gpus, positions, strict=True):
            free = self.gpu_free[position]
            if gpu not in free:
                free.append(gpu)
                free.sort()

    def splits(self, gpus: tuple[str, ...]) -> bool:
        """Whether ``gpus`` lie in more than one of the node's interconnect groups."""
        if len(gpus) < 2:
            return False
        touched = {i for i, group in enumerate(self.gpu_groups) for gpu in gpus if gpu in group}
        return len(touched) > 1

    def has_room(self) -> bool:
        return any(amount > EPSILON for amount in self.free.values())

    def node_view(self) -> Node:
        if self.view is None:
            self.view = Node(
                self.id,
                dict(self.free),
                self.executors,
                frozenset(self.warm),
                tuple(tuple(g) for g in self.gpu_free) if self.gpu_groups else (),
                gpu_group_size(self.gpu_groups),
                self.warm_slots,
                frozenset(self.setting_up),
            )
        return self.view


class _Trajectory:
    __slots__ = ("task", "step", "index", "turns", "turn", "reward_s", "lease", "wait_s", "works")

    def __init__(
        self,
        task: _TaskRun,
        index: int,
        turns: list[tuple[float, ActionType, float]],
        reward_s: float,
    ) -> None:
        self.task = task
        self.step = task.step
        self.index = index
        self.turns = turns
        self.turn = 0
        self.reward_s = reward_s
        self.lease: _Action | None = None
        self.wait_s = 0.0
        #: Each of its finished actions' position, type and run at minimum units.
        self.works: list[tuple[int, str, float]] = []


class _TaskRun:
    __slots__ = ("task", "step", "remaining", "step_start", "lease_type")

    def __init__(self, task: Task, lease_type: ActionType | None) -> None:
        self.task = task
        self.step = 0
        self.remaining = 0
        self.step_start = 0.0
        self.lease_type = lease_type


class _Action:
    __slots__ = (
        "id",
        "type",
        "tenant",
        "trajectory",
        "submitted",
        "origin",
        "base_s",
        "started",
        "finished",
        "node",
        "units",
        "allocation",
        "gpus",
        "run_s",
        "run_from",
        "left",
        "finish_at",
        "pending",
        "is_lease",
        "batch",
        "position",
    )

    def __init__(
        self,
        id: str,
        action_type: ActionType,
        tenant: str,
        trajectory: _Trajectory | None,
        submitted: float,
        base_s: float,
    ) -> None:
        self.id = id
        self.type = action_type
        self.tenant = tenant
        self.trajectory = trajectory
        self.submitted = submitted
        self.origin = submitted
        self.base_s = base_s
        self.started = -1.0
        self.finished = -1.0
        self.node: _Node | None = None
        self.units = 1
        self.allocation: dict[str, float] = {}
        self.gpus: tuple[str, ...] = ()
        self.run_s = 0.0
        #: When its run (after setup) or the part since its last resize began, and
        #: the fraction of its work then left; when it ends: a resize moves the end.
        self.run_from = 0.0
        self.left = 1.0
        self.finish_at = 0.0
        self.pending: PendingAction | None = None
        self.is_lease = False
        #: A batch member's batch: its members, run time, and whether this member
        #: is its first (which hands what it cost to the policy's estimates).
        self.batch: tuple[int, float, bool] | None = None
        #: Actions its trajectory submitted before it; None: a lease or a replay's.
        self.position: int | None = None


class _Load:
    """One (tenant, type)'s units of ``kind`` held and queued, their mean held, and
    one action's whole ``demand``."""

    __slots__ = ("kind", "demand", "job", "held", "queued", "mean_held", "at")

    def __init__(self, demand: Resources, job: str, now: float) -> None:
        self.kind = primary_kind(demand)
        self.demand = demand
        #: The task whose type it is ("" for a replayed trace's).
        self.job = job
        self.held = 0.0
        self.queued = 0.0
        self.mean_held = 0.0
        self.at = now

    def catch_up(self, now: float) -> None:
        """Average what was held since the last change in (it held ``held`` since)."""
        self.mean_held = decayed_mean(self.mean_held, self.held, now - self.at)
        self.at = now


def _job(action: _Action) -> str:
    """The job an action is of (``PendingAction.job``): its task, "" for a replayed trace's."""
    trajectory = action.trajectory
    return trajectory.task.task.name if trajectory is not None else ""


@dataclass(frozen=True, slots=True)
class Arrival:
    """An action submitted from outside the RL loop (a replayed trace).

    Open loop, it arrives ``at``. Closed loop (``after`` names another arrival's
    id), it arrives ``think_s`` after that arrival finishes, whatever ``at`` says.
    """

    at: float
    type: str
    tenant: str
    base_s: float
    id: str = ""
    trajectory: str = ""
    after: str = ""
    think_s: float = 0.0


@dataclass(slots=True)
class ActionRecord:
    id: str
    tenant: str
    type: str
    submitted: float
    started: float
    finished: float
    node: str
    units: int
    base_s: float
    #: ``<task>/<step>/<index>`` in a simulated run; a replay keeps the trace's.
    trajectory: str = ""

    @property
    def act_s(self) -> float:
        return self.finished - self.submitted


@dataclass(slots=True)
class TypeTotals:
    """Sums over one (tenant, action type)'s finished actions: where its ACT went."""

    actions: int = 0
    act_s: float = 0.0
    wait_s: float = 0.0
    #: Units held at the end, summed (elastic actions grow and shrink on the way).
    units: int = 0

    def add(self, act_s: float, wait_s: float, units: int) -> None:
        self.actions += 1
        self.act_s += act_s
        self.wait_s += wait_s
        self.units += units

    def pool(self, other: TypeTotals) -> None:
        self.actions += other.actions
        self.act_s += other.act_s
        self.wait_s += other.wait_s
        self.units += other.units


@dataclass(slots=True)
class SimResult:
    policy: str
    workload: str
    seed: int
    acts: list[float]
    steps: list[float]
    makespan_s: float
    capacity: dict[str, float]
    busy: dict[str, float]
    rounds: int
    records: list[ActionRecord] = field(default_factory=list)
    #: Per (tenant, action type).
    type_totals: dict[tuple[str, str], TypeTotals] = field(default_factory=dict)
    #: Per (tenant, action type, step of its task, from 0), for the RL loop's
    #: actions: a cold start shows in the first step.
    step_totals: dict[tuple[str, str, int], TypeTotals] = field(default_factory=dict)
    #: Per tenant and guaranteed kind, the unit-seconds of its guarantee it asked
    #: for while others held it (``Simulation._accrue_shortfall``).
    shortfall: dict[str, dict[str, float]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        acts = sorted(self.acts)
        hours = self.makespan_s / 3600.0
        resource_hours = {k: v * hours for k, v in sorted(self.capacity.items()) if v > 0}
        busy_hours = {k: self.busy.get(k, 0.0) / 3600.0 for k in resource_hours}
        utilisation = {
            k: busy_hours[k] / resource_hours[k] if resource_hours[k] > 0 else 0.0
            for k in resource_hours
        }
        main = [u for k, u in utilisation.items() if k != "memory" and k != "gpu_memory"]
        return {
            "mean_act_s": sum(acts) / len(acts) if acts else 0.0,
            "p50_act_s": quantile(acts, 0.50),
            "p95_act_s": quantile(acts, 0.95),
            "p99_act_s": quantile(acts, 0.99),
            "mean_step_s": sum(self.steps) / len(self.steps) if self.steps else 0.0,
            "makespan_s": self.makespan_s,
            "resource_hours": resource_hours,
            "busy_hours": busy_hours,
            "utilisation": sum(main) / len(main) if main else 0.0,
            "utilisation_by_kind": utilisation,
            "actions": len(acts),
            "steps": len(self.steps),
            "rounds": self.rounds,
        }


def quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


#: An empty mapping for a tenant that holds or queues nothing.
_NOTHING: Mapping[str, float] = MappingProxyType({})

# Event kinds, in the order they run at one instant; rounds run last.
_STEP, _SUBMIT, _FINISH, _THINK_DONE, _LEASE_READY, _SET_UP, _ROUND = 0, 1, 2, 3, 4, 5, 9


class Simulation:
    def __init__(
        self,
        workload: Workload,
        policy: str | Policy,
        *,
        keep_records: bool = False,
        on_record: Callable[[ActionRecord], None] | None = None,
        arrivals: Iterable[Arrival] | None = None,
        time_limit_s: float | None = None,
    ) -> None:
        self.workload = workload
        #: Stop (``truncated``) once simulated time passes this.
        self.time_limit_s = time_limit_s
        self.truncated = False
        name = policy if isinstance(policy, str) else policy.name
        self.policy_name = name
        self.static = name == "static"
        if isinstance(policy, str):
            self.policy: Policy = get_policy("fifo" if name in BASELINES else name)
        else:
            self.policy = policy
        specs = build_nodes(workload, name)
        self.nodes = {spec.id: _Node(spec, order) for order, spec in enumerate(specs)}
        self.capacity: dict[str, float] = {}
        for node in self.nodes.values():
            for kind, amount in node.capacity.items():
                self.capacity[kind] = self.capacity.get(kind, 0.0) + amount
        self.keep_records = keep_records
        self.on_record = on_record
        self.records: list[ActionRecord] = []
        self.now = 0.0
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.pending: dict[str, _Action] = {}
        #: Per action type with actions pending, the type and how many: a round on a
        #: large pool works its candidate nodes out per type, not per action.
        self._pending_types: dict[str, tuple[ActionType, int]] = {}
        self.usage: dict[str, dict[str, float]] = {}
        self.stats: dict[tuple[str, str], DurationStat] = {}
        self.batch_stats: dict[tuple[str, str], BatchStat] = {}
        #: Per (tenant, job): what its trajectories ran after each position and type.
        self.trajectory_stats: dict[tuple[str, str], TrajectoryStat] = {}
        #: Per (tenant, type): its primary kind, units held and queued, the mean
        #: held and when that mean was brought up to date (``Snapshot.type_loads``).
        self._loads: dict[tuple[str, str], _Load] = {}
        self.acts: list[float] = []
        self.type_totals: dict[tuple[str, str], TypeTotals] = {}
        self.step_totals: dict[tuple[str, str, int], TypeTotals] = {}
        self.steps: list[float] = []
        self.busy: dict[str, float] = {}
        #: Per tenant and kind, the demand of its pending actions at their minimum.
        self._queued: dict[str, dict[str, float]] = {}
        #: Per tenant, its guarantee of each kind some tenant is guaranteed.
        self._guaranteed: dict[str, dict[str, float]] = {}
        for tenant, quota in workload.quotas.items():
            for kind, amount in quota.guaranteed.items():
                if amount > 0:
                    self._guaranteed.setdefault(tenant, {})[kind] = amount
        #: Per kind some tenant is guaranteed, what all tenants hold, and what they
        #: hold beyond their own guarantees; per (tenant, kind), what of its
        #: guarantee it asks for and does not hold, where that is more than 0
        #: (``_accrue_shortfall``).
        self._used = {kind: 0.0 for kinds in self._guaranteed.values() for kind in kinds}
        self._borrowed = dict(self._used)
        self._owed: dict[tuple[str, str], float] = {}
        self.shortfall: dict[str, dict[str, float]] = {}
        self.rounds = 0
        self._round_at: float | None = None
        self._ids = 0
        self._room: set[str] = {n.id for n in self.nodes.values() if n.has_room()}
        #: Nodes with room that run something; idle nodes by group and by warm key.
        self._partial: set[str] = set()
        #: Per warm key, the nodes that hold it (``Snapshot.warm_nodes``).
        self._warm_nodes: dict[str, int] = {}
        #: Per warm key, when an action last started with it (``Snapshot.warm_used_at``).
        self._warm_used_at: dict[str, float] = {}
        self._idle: dict[str, list[tuple[int, str]]] = {}
        self._idle_warm: dict[str, list[tuple[int, str]]] = {}
        self._groups_of_type: dict[str, set[str]] = {}
        for node in self.nodes.values():
            self._idle.setdefault(node.group, []).append((node.order, node.id))
            for executor in node.executors:
                self._groups_of_type.setdefault(executor, set()).add(node.group)
        self._makespan = 0.0
        #: Running single elastic actions whose units (of a resizable kind) may change.
        self._resizable: dict[str, _Action] = {}
        self._runs: list[_TaskRun] = []
        #: Replays only: each arrival's trajectory, and the arrivals waiting on an action id.
        self._trajectory_of: dict[str, str] = {}
        self._waiting: dict[str, list[tuple[_Action, float]]] = {}
        if arrivals is not None:
            if self.static:
                raise ValueError(
                    "static holds a sandbox for a trajectory's whole life; an action trace "
                    "does not say when its trajectories began and ended"
                )
            self._load_arrivals(arrivals)
            return
        for task in workload.tasks:
            lease = _lease_type(task) if self.static else None
            run = _TaskRun(task, lease)
            self._runs.append(run)
            self._push(task.start_s, _STEP, run)

    def _stuck(self) -> str:
        """Why a run ended with actions queued: what the first one asks and its tenant holds.

        Usually a workload whose quota cannot hold what a policy needs at once
        (``static``'s sandboxes count against the tenant's limit while its
        trajectories wait for task-bound work, say).
        """
        first = next(iter(self.pending.values()))
        quota = self.workload.quotas.get(first.tenant)
        held = {k: round(v, 3) for k, v in sorted(self.usage.get(first.tenant, {}).items()) if v}
        limit = dict(sorted(quota.limit.items())) if quota is not None else "none"
        return (
            f"{self.policy_name}: {len(self.pending)} actions never placed; the first, "
            f"{first.id} ({first.type.id}, tenant {first.tenant}), asks "
            f"{dict(first.type.demand)} while its tenant holds {held} (limit {limit}) "
            f"and nothing else is left to finish"
        )

    def _load_arrivals(self, arrivals: Iterable[Arrival]) -> None:
        types = self.workload.action_types()
        ids: set[str] = set()
        for arrival in arrivals:
            action_type = types.get(arrival.type)
            if action_type is None:
                raise ValueError(f"trace type {arrival.type!r} is not in {self.workload.name}")
            self._ids += 1
            action = _Action(
                arrival.id or f"a{self._ids}",
                action_type,
                arrival.tenant,
                None,
                arrival.at,
                arrival.base_s,
            )
            if action.id in ids:
                raise ValueError(f"trace action {action.id!r} appears twice")
            ids.add(action.id)
            if arrival.trajectory:
                self._trajectory_of[action.id] = arrival.trajectory
            if arrival.after:
                self._waiting.setdefault(arrival.after, []).append((action, arrival.think_s))
            else:
                self._push(arrival.at, _SUBMIT, action)
        unknown = sorted(set(self._waiting) - ids)
        if unknown:
            raise ValueError(f"trace actions wait on {unknown[0]!r}, which is not in the trace")

    # -- event plumbing ------------------------------------------------------

    def _push(self, at: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, kind, self._seq, payload))

    def _wake(self) -> None:
        interval = self.workload.round_interval_s
        # The next boundary; a time a hair past one (float error) gets its round
        # at once, never at that boundary, which is in the past.
        at = (
            self.now
            if interval <= 0
            else max(math.ceil(self.now / interval - 1e-9) * interval, self.now)
        )
        if self._round_at is None or at < self._round_at:
            self._round_at = at
            self._push(at, _ROUND, at)

    def run(self) -> SimResult:
        events = self._events
        while events:
            at, kind, _, payload = heapq.heappop(events)
            if self.time_limit_s is not None and at > self.time_limit_s:
                self.truncated = True
                break
            if self._owed and at > self.now:
                self._accrue_shortfall(at - self.now)
            self.now = at
            if kind == _FINISH:
                # Else a resize moved it (a later one may move it back: one finish).
                if payload.finish_at == at and payload.finished < 0:
                    self._finish(payload)
            elif kind == _THINK_DONE:
                self._think_done(payload)
            elif kind == _SUBMIT:
                self._submit(payload)
            elif kind == _STEP:
                self._step(payload)
            elif kind == _LEASE_READY:
                self._next_turn(payload)
            elif kind == _SET_UP:
                self._set_up(*payload)
            elif kind == _ROUND and self._round_at == payload:
                self._round_at = None
                self._round()
        if self.pending and not self.truncated:
            raise PolicyError(self._stuck())
        if self._waiting and not self.truncated:
            raise ValueError(f"trace actions wait in a cycle (on {min(self._waiting)!r})")
        return SimResult(
            policy=self.policy_name,
            workload=self.workload.name,
            seed=self.workload.seed,
            acts=self.acts,
            type_totals=self.type_totals,
            step_totals=self.step_totals,
            steps=self.steps,
            makespan_s=self._makespan,
            capacity=self.capacity,
            busy=self.busy,
            rounds=self.rounds,
            records=self.records,
            shortfall=self.shortfall,
        )

    def _accrue_shortfall(self, elapsed_s: float) -> None:
        """Add ``elapsed_s`` of each guarantee that borrowers hold while its
        tenant asks for it: ``min(guaranteed, held + queued) - held``, less
        the pool's free room of the kind, up to what all tenants hold beyond
        their own guarantees.

        Room left free does not count, nor a pool whose tenants all hold
        within their guarantees: waiting for a warm node or a batch is the
        policy's own choice, not a guarantee taken. Free room anywhere in the
        pool counts as room (cores on GPU hosts for a sandbox call too), so
        what is counted is a lower bound. No policy gets it to 0
        where actions run to their end (a tenant back from a pause waits for
        what borrowers started), so it tells how soon each policy gives a
        tenant what it is guaranteed, and how much one that ignores
        guarantees took from the tenants that have them."""
        borrowed = self._borrowed
        used = self._used
        capacity = self.capacity
        for (tenant, kind), owed in self._owed.items():
            short = min(owed - (capacity.get(kind, 0.0) - used[kind]), borrowed[kind])
            if short > 1e-9:
                by_kind = self.shortfall.setdefault(tenant, {})
                by_kind[kind] = by_kind.get(kind, 0.0) + short * elapsed_s

    def _held(self, tenant: str, kind: str, before: float) -> None:
        """``tenant``'s usage of ``kind``, a kind some tenant is guaranteed, was
        ``before``: what is borrowed, and what it is owed, follow."""
        guaranteed = self._guaranteed.get(tenant, _NOTHING).get(kind, 0.0)
        after = self.usage[tenant][kind]
        self._used[kind] += after - before
        self._borrowed[kind] += max(after - guaranteed, 0.0) - max(before - guaranteed, 0.0)
        if guaranteed > 0:
            self._owe(tenant, kind, guaranteed)

    def _owe(self, tenant: str, kind: str, guaranteed: float) -> None:
        """What of its guarantee of ``kind`` ``tenant`` asks for and does not hold."""
        held = self.usage.get(tenant, _NOTHING).get(kind, 0.0)
        owed = min(guaranteed - held, self._queued.get(tenant, _NOTHING).get(kind, 0.0))
        if owed > 1e-9:
            self._owed[(tenant, kind)] = owed
        else:
            self._owed.pop((tenant, kind), None)

    # -- the RL loop -----------------------------------------------------------

    def _step(self, run: _TaskRun) -> None:
        task = run.task
        run.step_start = self.now
        run.remaining = task.trajectories
        seed = self.workload.seed
        for index in range(task.trajectories):
            turns, reward_s = draw_trajectory(seed, task, run.step, index)
            trajectory = _Trajectory(run, index, turns, reward_s)
            if run.lease_type is not None and any(
                a.binding == "trajectory" for _, a, _ in trajectory.turns
            ):
                lease = self._new_action(run.lease_type, task.tenant, trajectory, 0.0)
                lease.is_lease = True
                trajectory.lease = lease
                self._enqueue(lease)
            else:
                self._next_turn(trajectory)

    def _next_turn(self, trajectory: _Trajectory) -> None:
        if trajectory.turn < len(trajectory.turns):
            think, _, _ = trajectory.turns[trajectory.turn]
            self._push(self.now + think, _THINK_DONE, trajectory)
            return
        task = trajectory.task.task
        if task.reward is not None and trajectory.reward_s >= 0:
            reward_s, trajectory.reward_s = trajectory.reward_s, -1.0
            action = self._new_action(task.reward, task.tenant, trajectory, reward_s)
            action.position = len(trajectory.turns)
            self._submit(action)
            return
        self._trajectory_done(trajectory)

    def _think_done(self, trajectory: _Trajectory) -> None:
        _, action_type, base_s = trajectory.turns[trajectory.turn]
        trajectory.turn += 1
        action = self._new_action(action_type, trajectory.task.task.tenant, trajectory, base_s)
        action.position = trajectory.turn - 1
        if trajectory.turn == 1 and trajectory.wait_s:
            action.origin -= trajectory.wait_s
        self._submit(action)

    def _trajectory_done(self, trajectory: _Trajectory) -> None:
        if trajectory.lease is not None:
            self._release(trajectory.lease)
            trajectory.lease = None
        run = trajectory.task
        job = (run.task.tenant, run.task.name)
        stat = self.trajectory_stats.get(job)
        self.trajectory_stats[job] = trajectory_update(stat, trajectory.works)
        run.remaining -= 1
        if run.remaining:
            return
        end = self.now + run.task.train_s
        self.steps.append(end - run.step_start)
        self._makespan = max(self._makespan, end)
        run.step += 1
        if run.step < run.task.steps:
            self._push(end, _STEP, run)

    # -- actions -----------------------------------------------------------------

    def _new_action(
        self, action_type: ActionType, tenant: str, trajectory: _Trajectory | None, base_s: float
    ) -> _Action:
        self._ids += 1
        return _Action(f"a{self._ids}", action_type, tenant, trajectory, self.now, base_s)

    def _submit(self, action: _Action) -> None:
        trajectory = action.trajectory
        lease = trajectory.lease if trajectory is not None else None
        if lease is not None and action.type.binding == "trajectory":
            # static: the action runs in the sandbox its trajectory holds.
            action.node = lease.node
            action.started = self.now
            action.run_s = action.base_s
            action.finish_at = self.now + action.base_s
            self._push(action.finish_at, _FINISH, action)
            return
        self._enqueue(action)

    def _enqueue(self, action: _Action) -> None:
        t = action.type
        action.pending = PendingAction(
            id=action.id,
            tenant=action.tenant,
            type=t.id,
            demand=t.demand,
            submitted_at=action.submitted,
            priority=t.priority,
            job=_job(action),
            elasticity=t.elasticity
            if not self.static and self.policy_name != "partitioned"
            else Elasticity(t.elasticity.min_units, t.elasticity.min_units),
            affinity=t.affinity,
            batch_key=t.id if t.batch_limit > 1 else None,
            batch_limit=t.batch_limit,
            setup_s=t.setup_s,
            duration_hint_s=self._hint(action),
            remaining_hint_s=self._remaining_hint(action),
            position=action.position,
            may_split_gpus=t.may_split_gpus,
            may_shrink_gpus=t.may_shrink_gpus,
        )
        self.pending[action.id] = action
        _, count = self._pending_types.get(t.id, (t, 0))
        self._pending_types[t.id] = (t, count + 1)
        queued = self._queued.setdefault(action.tenant, {})
        guaranteed = self._guaranteed.get(action.tenant, _NOTHING)
        for kind, amount in action.type.demand.items():
            queued[kind] = queued.get(kind, 0.0) + amount
            if kind in guaranteed:
                self._owe(action.tenant, kind, guaranteed[kind])
        load = self._load_of(action)
        load.queued += action.type.demand.get(load.kind, 0.0)
        self._wake()

    def _load_of(self, action: _Action) -> _Load:
        """``action``'s type's load, its mean brought up to now (before it changes)."""
        key = (action.tenant, action.type.id)
        load = self._loads.get(key)
        if load is None:
            load = self._loads[key] = _Load(action.type.demand, _job(action), self.now)
        load.catch_up(self.now)
        return load

    def _hint(self, action: _Action) -> float | None:
        """The client's hint of ``action``'s run time, where its type has one: the same
        under every policy (drawn from the trajectory, the turn and the type)."""
        cv = action.type.hint_cv
        trajectory = action.trajectory
        if cv is None or trajectory is None or action.is_lease:
            return None
        return self._as_hinted(action, trajectory, action.base_s, cv, "hint")

    def _remaining_hint(self, action: _Action) -> float | None:
        """The client's hint of what ``action``'s trajectory runs after it (its later
        turns and reward, at min units), where its type has one."""
        cv = action.type.remaining_hint_cv
        trajectory = action.trajectory
        if cv is None or trajectory is None or action.is_lease:
            return None
        left = sum(base_s for _, _, base_s in trajectory.turns[trajectory.turn :])
        if trajectory.reward_s >= 0:  # the reward is still to come (cleared as submitted)
            left += trajectory.reward_s
        return self._as_hinted(action, trajectory, left, cv, "left")

    def _as_hinted(
        self, action: _Action, trajectory: _Trajectory, exact: float, cv: float, tag: str
    ) -> float:
        """``exact`` off by a lognormal factor of mean 1 and ``cv``, drawn from the
        trajectory, the turn, the type and ``tag``: the same under every policy."""
        if cv == 0 or exact == 0:
            return exact
        key = f"{self.workload.seed}:{trajectory.task.task.name}:{trajectory.step}:"
        rng = random.Random(f"{key}{trajectory.index}:{trajectory.turn}:{action.type.id}:{tag}")
        return exact * Dist("lognormal", mean=1.0, cv=cv).sample(rng)

    def _round(self) -> None:
        if not self.pending and not self._resizable:
            return
        resizable = self._resizable_now()
        if not self.pending and not resizable:
            return
        self.rounds += 1
        types = set(self._pending_types)
        if len(self._room) > FULL_VIEW_NODES:
            chosen = self._candidates(types)
        else:
            chosen = [self.nodes[node_id] for node_id in self._room]
        held_on = {held.node for held in resizable}
        if resizable:
            listed = {node.id for node in chosen}
            chosen += [self.nodes[node_id] for node_id in held_on if node_id not in listed]
        chosen.sort(key=lambda n: n.order)
        nodes = tuple(
            node.node_view()
            for node in chosen
            if node.id in held_on or not types.isdisjoint(node.executors)
        )
        if not nodes:
            return
        running = tuple(
            RunningAction(f"usage:{tenant}", tenant, "", "", usage, 0.0)
            for tenant, usage in sorted(self.usage.items())
        )
        snapshot = Snapshot(
            now=self.now,
            nodes=nodes,
            quotas=self.workload.quotas,
            pending=tuple(a.pending for a in self.pending.values() if a.pending is not None),
            running=running,
            duration_stats=self.stats,
            capacity=self.capacity,
            resizable=resizable,
            warm_nodes=self._warm_nodes,
            warm_used_at=self._warm_used_at,
            batch_stats=self.batch_stats,
            type_loads=self._type_loads(),
            trajectory_stats=self.trajectory_stats,
        )
        decision = self.policy.decide(snapshot)
        for resize in decision.resizes:
            self._resize(resize)
        batches: dict[str, list[tuple[_Action, Placement]]] = {}
        for placement in decision.placements:
            action = self.pending.pop(placement.action_id, None)
            if action is None:
                raise PolicyError(f"{self.policy_name}: unknown or repeated {placement.action_id}")
            t, count = self._pending_types[action.type.id]
            if count > 1:
                self._pending_types[t.id] = (t, count - 1)
            else:
                del self._pending_types[t.id]
            queued = self._queued[action.tenant]
            guaranteed = self._guaranteed.get(action.tenant, _NOTHING)
            for kind, amount in action.type.demand.items():
                queued[kind] -= amount
                if kind in guaranteed:
                    self._owe(action.tenant, kind, guaranteed[kind])
            key = placement.batch_id or placement.action_id
            batches.setdefault(key, []).append((action, placement))
        for members in batches.values():
            self._start(members)

    def _type_loads(self) -> dict[tuple[str, str], TypeLoad]:
        out = {}
        for key, load in self._loads.items():
            load.catch_up(self.now)
            out[key] = TypeLoad(
                load.kind, load.held, load.queued, load.mean_held, load.job, load.demand
            )
        return out

    def _resizable_now(self) -> tuple[Resizable, ...]:
        """Running actions that could give units back to a pending one, or grow on their node."""
        pending = bool(self.pending)
        out = []
        for a in self._resizable.values():
            node = a.node
            if node is None:
                continue
            elasticity = a.type.elasticity
            units = a.units
            gives_gpus = elasticity.unit_kind not in RESIZABLE_KINDS  # back only, never more
            if not (pending and units > elasticity.min_units):
                kind = elasticity.unit_kind
                if (
                    gives_gpus
                    or units >= elasticity.max_units
                    or node.free.get(kind, 0.0) + EPSILON < a.allocation[kind] / units
                ):
                    continue
            gpus: tuple[str, ...] = ()
            groups: tuple[int, ...] | None = ()
            if gives_gpus:
                gpus, groups = a.gpus, gpu_group_positions(node.gpu_groups, a.gpus)
            out.append(
                Resizable(
                    a.id,
                    a.tenant,
                    node.id,
                    a.allocation,
                    units,
                    elasticity,
                    a.type.id,
                    done_s=a.base_s * (1.0 - self._left(a)),
                    gpus=gpus,
                    gpu_groups=groups or (),
                )
            )
        return tuple(out)

    def _left(self, action: _Action) -> float:
        """The fraction of ``action``'s work not done yet."""
        span = action.finish_at - action.run_from
        if self.now <= action.run_from or span <= 0:
            return action.left
        return action.left * max(action.finish_at - self.now, 0.0) / span

    def _candidates(self, types: set[str]) -> list[_Node]:
        """The nodes a round needs on a large pool: every partly used node with room,
        idle nodes warm for pending affinities, then idle nodes (alike within a group)
        until they hold twice what the pending actions could use at their most units."""
        chosen: dict[str, _Node] = {}
        for node_id in self._partial:
            node = self.nodes[node_id]
            if not types.isdisjoint(node.executors):
                chosen[node_id] = node
        need: dict[str, float] = {}
        warm_wanted: dict[str, int] = {}
        for t, count in self._pending_types.values():
            kind = "gpu" if t.demand.get("gpu") else "cpu"
            amount = t.demand.get(kind, 1.0) * max(t.elasticity.max_units, 1) * count
            for group in self._groups_of_type.get(t.id, ()):
                need[group] = need.get(group, 0.0) + amount
            for key in t.affinity:
                warm_wanted[key] = warm_wanted.get(key, 0) + count
        for key, count in warm_wanted.items():
            for node in self._take_idle(self._idle_warm.get(key, []), count, key):
                chosen[node.id] = node
        have: dict[str, float] = {}
        for node in chosen.values():
            free = node.free.get("gpu", 0.0) or node.free.get("cpu", 0.0)
            have[node.group] = have.get(node.group, 0.0) + free
        for group, amount in need.items():
            heap = self._idle.get(group, [])
            while have.get(group, 0.0) < 2.0 * amount:
                taken = self._take_idle(heap, 1, None, skip=chosen)
                if not taken:
                    break
                node = taken[0]
                chosen[node.id] = node
                have[group] = have.get(group, 0.0) + (
                    node.free.get("gpu", 0.0) or node.free.get("cpu", 0.0) or 1.0
                )
        return list(chosen.values())

    def _take_idle(
        self,
        heap: list[tuple[int, str]],
        count: int,
        warm: str | None,
        skip: Mapping[str, _Node] | None = None,
    ) -> list[_Node]:
        """Up to ``count`` idle nodes from a lazily cleaned heap, lowest order first."""
        out: list[_Node] = []
        kept: list[tuple[int, str]] = []
        seen: set[str] = set()
        while heap and len(out) < count:
            entry = heapq.heappop(heap)
            node = self.nodes[entry[1]]
            if not node.idle or (warm is not None and warm not in node.warm) or node.id in seen:
                continue
            seen.add(node.id)
            kept.append(entry)
            if skip is None or node.id not in skip:
                out.append(node)
        for entry in kept:
            heapq.heappush(heap, entry)
        return out

    def _start(self, members: list[tuple[_Action, Placement]]) -> None:
        now = self.now
        node = self.nodes.get(members[0][1].node_id)
        if node is None:
            raise PolicyError(f"{self.policy_name}: unknown node {members[0][1].node_id}")
        runs: list[float] = []
        setup = 0.0
        start = 0.0
        for action, placement in members:
            if placement.node_id != node.id:
                raise PolicyError(f"{self.policy_name}: batch split across nodes")
            if action.type.id not in node.executors:
                raise PolicyError(f"{self.policy_name}: {action.type.id} placed on {node.id}")
            self._hold(action, node, placement)
        # A batch's members share its GPUs: each holds its share of the count, and
        # together the GPU ids, taken once.
        count = int(round(sum(placement.allocation.get("gpu", 0.0) for _, placement in members)))
        if node.gpu_groups and count:
            named = members[0][1].gpus
            free = {gpu for group in node.gpu_free for gpu in group}
            if named and (len(named) != count or not free.issuperset(named)):
                raise PolicyError(
                    f"{self.policy_name}: {members[0][0].id} takes GPUs {list(named)} on "
                    f"{node.id}, where {sorted(free)} are free"
                )
            gpus = take_gpus(node.gpu_free, named, count)
            for action, _ in members:
                action.gpus = gpus
        for action, placement in members:
            if action.pending is not None:
                load = self._load_of(action)
                amount = action.type.demand.get(load.kind, 0.0)
                load.queued -= amount
                load.held += amount
            elasticity = action.type.elasticity
            action.units = placement.units
            if action.is_lease:
                runs.append(0.0)
            else:
                run_s = action.base_s / speedup(elasticity, placement.units)
                if node.splits(action.gpus):
                    run_s *= action.type.split_gpus_slowdown
                runs.append(run_s)
            start = max(start, action.type.start_s)
        # A key being pulled or loaded is ready when that setup ends: an action
        # placed meanwhile waits for the rest of it, not for a new one.
        pulls: dict[str, float] = {}
        for action, _ in members:
            for key in action.type.affinity:
                if key not in node.warm:
                    pulls[key] = max(pulls.get(key, 0.0), action.type.setup_s)
        # Every key's readiness first: keeping one warm may evict another of them.
        keys = sorted({k for action, _ in members for k in action.type.affinity})
        readies = [node.warm.get(key) for key in keys]
        for key, ready in zip(keys, readies, strict=True):
            if ready is None:
                ready = now + pulls[key]
                if ready > now:
                    node.setting_up.add(key)
                    self._push(ready, _SET_UP, (node, key, ready))
            setup = max(setup, ready - now)
            if key not in node.warm:
                self._warm_nodes[key] = self._warm_nodes.get(key, 0) + 1
            node.warm[key] = ready
            node.warm.move_to_end(key)
            self._warm_used_at[key] = now
            while len(node.warm) > node.warm_slots:
                evicted, _ = node.warm.popitem(last=False)
                node.setting_up.discard(evicted)
                self._warm_nodes[evicted] -= 1
        node.view = None
        longest = max(runs)
        marginal = members[0][0].type.batch_marginal
        run_s = longest + marginal * (sum(runs) - longest)
        if len(members) > 1:
            for index, (action, _) in enumerate(members):
                action.batch = (len(members), run_s, index == 0)
        for (action, _), own in zip(members, runs, strict=True):
            action.started = now
            action.run_s = own
            if action.is_lease:
                trajectory = action.trajectory
                assert trajectory is not None
                trajectory.wait_s = now + setup + start - action.submitted
                self._push(now + setup + start, _LEASE_READY, trajectory)
            else:
                action.run_from = now + setup + start
                action.finish_at = action.run_from + run_s
                self._push(action.finish_at, _FINISH, action)
                pending = action.pending
                if (
                    len(members) == 1
                    and pending is not None
                    and pending.elasticity.max_units > pending.elasticity.min_units
                    and (
                        pending.elasticity.unit_kind in RESIZABLE_KINDS
                        or (action.type.may_shrink_gpus and len(action.gpus) == action.units)
                    )
                ):
                    self._resizable[action.id] = action

    def _set_up(self, node: _Node, key: str, ready: float) -> None:
        """A setup ended: actions that waited for it may now go to the node."""
        if node.warm.get(key) == ready:
            node.setting_up.discard(key)
            node.view = None
            if self.pending:
                self._wake()

    def _resize(self, resize: Resize) -> None:
        """Change a running action's units: the rest of its run goes at their speed."""
        action = self._resizable.get(resize.action_id)
        elasticity = action.type.elasticity if action is not None else None
        if action is None or action.node is None or elasticity is None:
            raise PolicyError(f"{self.policy_name}: resizes {resize.action_id}, not resizable")
        kind = elasticity.unit_kind
        unit = action.allocation[kind] / action.units
        expected = {**action.allocation, kind: unit * resize.units}
        gives_gpus = kind not in RESIZABLE_KINDS
        if (
            resize.node_id != action.node.id
            or not elasticity.min_units <= resize.units <= elasticity.max_units
            or resize.units == action.units
            or set(resize.allocation) != set(expected)
            or any(abs(resize.allocation[k] - v) > 1e-6 for k, v in expected.items())
            or (
                gives_gpus
                and (
                    resize.units > action.units
                    or len(set(resize.gpus)) != resize.units
                    or not set(resize.gpus) <= set(action.gpus)
                )
            )
        ):
            raise PolicyError(
                f"{self.policy_name}: resizes {action.id} to {resize.units} units "
                f"{dict(resize.allocation)}; it holds {action.units} units {action.allocation}"
            )
        now = self.now
        node = action.node
        released = action.allocation[kind] - expected[kind]
        if -released > node.free.get(kind, 0.0) + 1e-6:
            raise PolicyError(
                f"{self.policy_name}: grows {action.id} by {-released} {kind} on {node.id} "
                f"with {node.free.get(kind, 0.0)} free"
            )
        node.free[kind] = node.free.get(kind, 0.0) + released
        usage = self.usage[action.tenant]
        before = usage.get(kind, 0.0)
        usage[kind] = before - released
        if kind in self._borrowed:
            self._held(action.tenant, kind, before)
        self.busy[kind] = self.busy.get(kind, 0.0) + released * (now - action.started)
        action.allocation = expected
        # The part of the run not yet done, at the new units' speed.
        action.left = self._left(action)
        action.run_from = max(now, action.run_from)
        action.units = resize.units
        action.run_s = action.base_s / speedup(elasticity, resize.units)
        if gives_gpus:
            node.free_gpus(tuple(gpu for gpu in action.gpus if gpu not in resize.gpus))
            action.gpus = resize.gpus
            if node.splits(action.gpus):
                action.run_s *= action.type.split_gpus_slowdown
            action.run_from += action.type.shrink_gpus_s  # it checkpoints and re-forms
        action.finish_at = action.run_from + action.left * action.run_s
        self._push(action.finish_at, _FINISH, action)
        node.view = None
        self._room.add(node.id)
        self._partial.add(node.id)

    def _hold(self, action: _Action, node: _Node, placement: Placement) -> None:
        for kind, amount in placement.allocation.items():
            if amount < -EPSILON or amount > node.free.get(kind, 0.0) + 1e-6:
                raise PolicyError(
                    f"{self.policy_name}: {action.id} takes {amount} {kind} on {node.id} "
                    f"with {node.free.get(kind, 0.0)} free"
                )
        quota = self.workload.quotas.get(action.tenant)
        usage = self.usage.setdefault(action.tenant, {})
        borrowed = self._borrowed
        for kind, amount in placement.allocation.items():
            node.free[kind] = node.free.get(kind, 0.0) - amount
            before = usage.get(kind, 0.0)
            usage[kind] = before + amount
            if kind in borrowed:
                self._held(action.tenant, kind, before)
            if quota is not None and kind in quota.limit and usage[kind] > quota.limit[kind] + 1e-6:
                raise PolicyError(f"{self.policy_name}: {action.tenant} over its {kind} limit")
        action.node = node
        action.allocation = dict(placement.allocation)
        action.gpus = placement.gpus
        node.view = None
        node.idle = False
        if node.has_room():
            self._partial.add(node.id)
        else:
            self._room.discard(node.id)
            self._partial.discard(node.id)

    def _release(self, action: _Action) -> None:
        node = action.node
        assert node is not None
        held_s = self.now - action.started
        usage = self.usage[action.tenant]
        borrowed = self._borrowed
        for kind, amount in action.allocation.items():
            node.free[kind] = node.free.get(kind, 0.0) + amount
            before = usage.get(kind, 0.0)
            usage[kind] = before - amount
            if kind in borrowed:
                self._held(action.tenant, kind, before)
            self.busy[kind] = self.busy.get(kind, 0.0) + amount * held_s
        if action.gpus:
            node.free_gpus(action.gpus)
        action.allocation = {}
        node.view = None
        self._room.add(node.id)
        if all(abs(node.free.get(k, 0.0) - v) < 1e-6 for k, v in node.capacity.items()):
            node.idle = True
            self._partial.discard(node.id)
            entry = (node.order, node.id)
            heapq.heappush(self._idle.setdefault(node.group, []), entry)
            for key in node.warm:
                heapq.heappush(self._idle_warm.setdefault(key, []), entry)
        else:
            self._partial.add(node.id)
        self._wake()

    def _finish(self, action: _Action) -> None:
        action.finished = self.now
        self._resizable.pop(action.id, None)
        self._makespan = max(self._makespan, self.now)
        in_lease = action.allocation == {} and not action.is_lease
        if action.pending is not None:
            load = self._load_of(action)
            load.held -= action.type.demand.get(load.kind, 0.0)
        if not in_lease:
            self._release(action)
        act = self.now - action.origin
        self.acts.append(act)
        key = (action.tenant, action.type.id)
        wait = action.started - action.origin
        totals = self.type_totals.get(key)
        if totals is None:
            totals = self.type_totals[key] = TypeTotals()
        totals.add(act, wait, action.units)
        work = work_at_min_units(action.type.elasticity, action.run_s, action.units)
        trajectory = action.trajectory
        if trajectory is not None:
            step_key = (*key, trajectory.step)
            totals = self.step_totals.get(step_key)
            if totals is None:
                totals = self.step_totals[step_key] = TypeTotals()
            totals.add(act, wait, action.units)
            if action.position is not None:
                # A batch member's work is its batch's run.
                trajectory.works.append((action.position, action.type.id, work))
        if action.batch is None:
            self.stats[key] = stat_update(self.stats.get(key), work)
        else:  # what a scheduler sees of a batch: its members and how long it ran
            members, batch_s, first = action.batch
            single_s = (
                observed_work(action.tenant, action.type.id, self.stats, type_priors(self.stats))
                if first
                else None
            )
            if single_s is not None:
                self.batch_stats[key] = batch_update(
                    self.batch_stats.get(key), batch_s, members, single_s
                )
        if self.keep_records or self.on_record is not None:
            record = ActionRecord(
                action.id,
                action.tenant,
                action.type.id,
                action.origin,
                action.started,
                action.finished,
                action.node.id if action.node else "",
                action.units,
                action.base_s,
                f"{trajectory.task.task.name}/{trajectory.step}/{trajectory.index}"
                if trajectory is not None
                else self._trajectory_of.get(action.id, ""),
            )
            if self.keep_records:
                self.records.append(record)
            if self.on_record is not None:
                self.on_record(record)
        if trajectory is not None:
            self._next_turn(trajectory)
        elif self._waiting:
            self._arrive_after(action)

    def _arrive_after(self, action: _Action) -> None:
        """Closed-loop replay: the arrivals that waited on ``action`` come after their think time.

        With none, they are submitted at once, as the RL loop submits a reward call.
        """
        for follower, think_s in self._waiting.pop(action.id, ()):
            follower.submitted = follower.origin = self.now + think_s
            if think_s > 0:
                self._push(follower.submitted, _SUBMIT, follower)
            else:
                self._submit(follower)


def _lease_type(task: Task) -> ActionType | None:
    """The sandbox a trajectory holds in ``static``: its largest trajectory-bound demand."""
    bound = [a for a in task.types if a.binding == "trajectory"]
    if not bound:
        return None
    demand: dict[str, float] = {}
    for action in bound:
        for kind, amount in action.demand.items():
            demand[kind] = max(demand.get(kind, 0.0), amount)
    return ActionType(
        id=f"{task.name}.{LEASE_SUFFIX}",
        executor=bound[0].executor,
        demand=demand,
        duration_s=bound[0].duration_s,
        binding="trajectory",
        setup_s=max(a.setup_s for a in bound),
        affinity=frozenset().union(*(a.affinity for a in bound)),
        start_s=max(a.start_s for a in bound),
    )


def simulate(workload: Workload, policy: str | Policy, *, keep_records: bool = False) -> SimResult:
    return Simulation(workload, policy, keep_records=keep_records).run()


def run_many(
    workload: Workload, policies: Iterable[str], seeds: Iterable[int]
) -> dict[str, list[SimResult]]:
    out: dict[str, list[SimResult]] = {}
    for seed in seeds:
        seeded = workload.with_seed(seed)
        for name in policies:
            out.setdefault(name, []).append(simulate(seeded, name))
    return out
