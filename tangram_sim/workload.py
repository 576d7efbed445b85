"""Workloads: the YAML format under ``fixtures/workloads/`` and its typed form.

See ``fixtures/workloads/README.md`` for the format. Every random draw comes
from a stream seeded by (seed, task, step, trajectory), so all policies replay
exactly the same trajectories, think times and action durations.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tangram_policy.types import Elasticity, TenantQuota
from tangram_sim.schema import schema_error


class WorkloadError(ValueError):
    """A workload that cannot be run, with the field at fault."""


@dataclass(frozen=True, slots=True)
class Dist:
    """``const`` (value), ``uniform`` (low, high), ``lognormal`` / ``exponential`` (mean, cv)."""

    kind: str = "const"
    value: float = 0.0
    low: float = 0.0
    high: float = 0.0
    mean: float = 0.0
    cv: float = 1.0

    def sample(self, rng: random.Random) -> float:
        if self.kind == "const":
            return self.value
        if self.kind == "uniform":
            return rng.uniform(self.low, self.high)
        if self.kind == "exponential":
            return rng.expovariate(1.0 / self.mean) if self.mean > 0 else 0.0
        if self.kind == "lognormal":
            sigma2 = math.log(1.0 + self.cv * self.cv)
            return rng.lognormvariate(math.log(self.mean) - sigma2 / 2.0, math.sqrt(sigma2))
        raise ValueError(f"unknown distribution {self.kind!r}")

    def expected(self) -> float:
        if self.kind == "const":
            return self.value
        if self.kind == "uniform":
            return (self.low + self.high) / 2.0
        return self.mean


@dataclass(frozen=True, slots=True)
class ActionType:
    """An action a trajectory submits; ``id`` is ``<task>.<name>``, the policy's type."""

    id: str
    executor: str
    demand: Mapping[str, float]
    duration_s: Dist
    weight: float = 1.0
    #: ``trajectory``: in ``static`` it runs in the sandbox its trajectory holds;
    #: ``task``: in ``static`` it runs on the task's fixed share of the pool.
    binding: str = "trajectory"
    elasticity: Elasticity = field(default_factory=Elasticity)
    #: Setup on a node that is not warm with ``affinity`` (image pull, model load).
    setup_s: float = 0.0
    affinity: frozenset[str] = frozenset()
    #: Per-execution start (a sandbox restored from its snapshot): action-level
    #: policies pay it per action, ``static`` once per trajectory.
    start_s: float = 0.0
    batch_limit: int = 1
    #: Extra time per extra batch member, as a fraction of its own duration.
    batch_marginal: float = 1.0
    priority: int = 0
    #: Run time x this when its GPUs span interconnect groups (tensor-parallel
    #: traffic over PCIe/the host instead of NVLink); 1: placement does not matter.
    split_gpus_slowdown: float = 1.0
    #: Its clients say its GPUs need not share a group (``PendingAction.may_split_gpus``):
    #: what the policy is told, where ``split_gpus_slowdown`` is what a split costs.
    may_split_gpus: bool = False
    #: Its runs can give GPUs above their minimum back while they run
    #: (data-parallel shards that checkpoint): the policy may take them back
    #: for actions that wait, and each time the run pauses ``shrink_gpus_s``.
    may_shrink_gpus: bool = False
    shrink_gpus_s: float = 0.0
    #: Clients hint each action's run time at min units, off by a lognormal
    #: factor with mean 1 and this coefficient of variation (0: exact); None: no hint.
    hint_cv: float | None = None
    #: Clients hint, with each action, the run seconds (at min units) its
    #: trajectory will submit after it, off likewise; None: no hint.
    remaining_hint_cv: float | None = None


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    tenant: str
    steps: int
    trajectories: int
    turns: Dist
    think_s: Dist
    actions: tuple[ActionType, ...]
    reward: ActionType | None = None
    #: Trainer time between the last trajectory of a step and the next step.
    train_s: float = 0.0
    #: Offset of the first step (tasks of a mix need not start together).
    start_s: float = 0.0

    @property
    def types(self) -> tuple[ActionType, ...]:
        """Its action types, the reward's last."""
        return (*self.actions, *((self.reward,) if self.reward else ()))


#: A trajectory's turns: (LLM think s before it, the action, its run s at minimum units).
Turns = list[tuple[float, ActionType, float]]


def draw_trajectory(seed: int, task: Task, step: int, index: int) -> tuple[Turns, float]:
    """Trajectory ``index`` of ``task``'s ``step``: its turns and its reward call's run
    s, or -1 where no reward call follows the turns (none, or it is the only turn,
    after a think). From the trajectory's own stream, so every policy replays it.
    """
    rng = random.Random(f"{seed}:{task.name}:{step}:{index}")
    turns = max(0, int(round(task.turns.sample(rng))))
    weights = [a.weight for a in task.actions]
    plan: Turns = []
    for _ in range(turns if task.actions else 0):
        think = max(0.0, task.think_s.sample(rng))
        action = rng.choices(task.actions, weights)[0] if len(task.actions) > 1 else task.actions[0]
        plan.append((think, action, max(0.0, action.duration_s.sample(rng))))
    final_think = max(0.0, task.think_s.sample(rng)) if not plan else 0.0
    reward_s = max(0.0, task.reward.duration_s.sample(rng)) if task.reward else 0.0
    if not plan and final_think:
        return ([(final_think, task.reward, reward_s)] if task.reward else []), -1.0
    return plan, reward_s


@dataclass(frozen=True, slots=True)
class NodeGroup:
    name: str
    count: float
    capacity: Mapping[str, float]
    executors: frozenset[str]
    gpu_groups: int = 1
    warm_slots: int = 4


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    seed: int
    pool: tuple[NodeGroup, ...]
    quotas: Mapping[str, TenantQuota]
    tasks: tuple[Task, ...]
    #: Scheduling rounds happen at most this often (0: after every batch of events).
    round_interval_s: float = 0.0

    def with_seed(self, seed: int) -> Workload:
        return replace(self, seed=seed)

    def scaled(self, factor: float) -> Workload:
        """The same workload on ``factor`` times the pool: whole nodes, then one partial node."""
        return replace(self, pool=tuple(replace(g, count=g.count * factor) for g in self.pool))

    def with_hints(self, cv: float | None, remaining_cv: float | None = None) -> Workload:
        """The same workload with every action type's run time hinted by its clients
        to within ``cv`` (``ActionType.hint_cv``), and what its trajectory still
        runs after it to within ``remaining_cv`` (``remaining_hint_cv``); None
        leaves that hint as the workload has it."""

        def hinted(action: ActionType) -> ActionType:
            if cv is not None:
                action = replace(action, hint_cv=cv)
            if remaining_cv is not None:
                action = replace(action, remaining_hint_cv=remaining_cv)
            return action

        tasks = tuple(
            replace(
                task,
                actions=tuple(hinted(a) for a in task.actions),
                reward=hinted(task.reward) if task.reward is not None else None,
            )
            for task in self.tasks
        )
        return replace(self, tasks=tasks)

    def action_types(self) -> dict[str, ActionType]:
        out: dict[str, ActionType] = {}
        for task in self.tasks:
            for action in task.types:
                out[action.id] = action
        return out


INTEGRAL_KINDS = ("gpu",)


def _dist(raw: Any) -> Dist:
    if isinstance(raw, int | float):
        return Dist("const", value=float(raw))
    kind = raw.get("dist", "const")
    return Dist(
        kind=kind,
        value=float(raw.get("value", 0.0)),
        low=float(raw.get("low", 0.0)),
        high=float(raw.get("high", 0.0)),
        mean=float(raw.get("mean", 0.0)),
        cv=float(raw.get("cv", 1.0)),
    )


def _resources(raw: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in (raw or {}).items()}


def _action(task: str, raw: dict[str, Any], default_binding: str) -> ActionType:
    elasticity = raw.get("elasticity") or {}
    demand = _resources(raw["demand"])
    batch = raw.get("batch") or {}
    return ActionType(
        id=f"{task}.{raw['type']}",
        executor=str(raw["executor"]),
        demand=demand,
        duration_s=_dist(raw["duration_s"]),
        weight=float(raw.get("weight", 1.0)),
        binding=str(raw.get("binding", default_binding)),
        elasticity=Elasticity(
            min_units=int(elasticity.get("min_units", 1)),
            max_units=int(elasticity.get("max_units", elasticity.get("min_units", 1))),
            parallel_fraction=float(elasticity.get("parallel_fraction", 0.0)),
            unit_kind=str(elasticity.get("unit_kind", "gpu" if demand.get("gpu") else "cpu")),
        ),
        setup_s=float(raw.get("setup_s", 0.0)),
        affinity=frozenset(raw.get("affinity") or ()),
        start_s=float(raw.get("start_s", 0.0)),
        batch_limit=int(batch.get("limit", 1)),
        batch_marginal=float(batch.get("marginal", 1.0)),
        priority=int(raw.get("priority", 0)),
        split_gpus_slowdown=float(raw.get("split_gpus_slowdown", 1.0)),
        may_split_gpus=bool(raw.get("may_split_gpus", False)),
        may_shrink_gpus=bool(raw.get("may_shrink_gpus", False)),
        shrink_gpus_s=float(raw.get("shrink_gpus_s", 0.0)),
        hint_cv=float(raw["hint_cv"]) if "hint_cv" in raw else None,
        remaining_hint_cv=float(raw["remaining_hint_cv"]) if "remaining_hint_cv" in raw else None,
    )


def workload_from_dict(raw: Mapping[str, Any]) -> Workload:
    """The typed workload; ``WorkloadError`` names the field if it cannot be run."""
    problem = schema_error(raw)
    if problem is not None:
        raise WorkloadError(problem)
    pool = tuple(
        NodeGroup(
            name=str(g["name"]),
            count=float(g.get("count", 1)),
            capacity=_resources(g["capacity"]),
            executors=frozenset(g["executors"]),
            gpu_groups=int(g.get("gpu_groups", 1)),
            warm_slots=int(g.get("warm_slots", 4)),
        )
        for g in raw["pool"]
    )
    quotas = {
        str(t["name"]): TenantQuota(
            tenant=str(t["name"]),
            guaranteed=_resources(t.get("guaranteed")),
            limit=_resources(t.get("limit")),
            weight=float(t.get("weight", 1.0)),
            lending_limit=_resources(t.get("lending_limit")),
        )
        for t in raw.get("tenants") or ()
    }
    tasks = []
    for t in raw["tasks"]:
        name = str(t["name"])
        tasks.append(
            Task(
                name=name,
                tenant=str(t.get("tenant", "default")),
                steps=int(t["steps"]),
                trajectories=int(t["trajectories"]),
                turns=_dist(t["turns"]),
                think_s=_dist(t.get("think_s", 0.0)),
                actions=tuple(_action(name, a, "trajectory") for a in t.get("actions") or ()),
                reward=_action(name, t["reward"], "task") if t.get("reward") else None,
                train_s=float(t.get("train_s", 0.0)),
                start_s=float(t.get("start_s", 0.0)),
            )
        )
    _validate(pool, quotas, tasks)
    return Workload(
        name=str(raw.get("name", "workload")),
        seed=int(raw.get("seed", 1)),
        pool=pool,
        quotas=quotas,
        tasks=tuple(tasks),
        round_interval_s=float((raw.get("sim") or {}).get("round_interval_s", 0.0)),
    )


def _validate(
    pool: tuple[NodeGroup, ...], quotas: Mapping[str, TenantQuota], tasks: list[Task]
) -> None:
    """Refuse what the schema cannot see: an action that could never run, a tenant
    misnamed, a name used twice."""
    for position, quota in enumerate(quotas.values()):
        for kind, lendable in quota.lending_limit.items():
            if lendable > quota.guaranteed.get(kind, 0.0):
                raise WorkloadError(
                    f"tenants[{position}].lending_limit.{kind}: above its guaranteed "
                    f"{quota.guaranteed.get(kind, 0.0):g}"
                )
    names = [task.name for task in tasks]
    for position, task in enumerate(tasks):
        where = f"tasks[{position}]"
        if task.name in names[:position]:
            raise WorkloadError(f"{where}.name: {task.name!r} names another task too")
        if quotas and task.tenant not in quotas:
            raise WorkloadError(
                f"{where}.tenant: {task.tenant!r} is not one of the tenants ({', '.join(quotas)})"
            )
        calls = [("actions", i, a) for i, a in enumerate(task.actions)]
        if task.reward is not None:
            calls.append(("reward", -1, task.reward))
        for part, i, action in calls:
            at = f"{where}.{part}" if i < 0 else f"{where}.{part}[{i}]"
            groups = [g for g in pool if action.executor in g.executors]
            if not groups:
                raise WorkloadError(f"{at}.executor: no node group runs {action.executor!r}")
            if not any(
                all(amount <= g.capacity.get(kind, 0.0) for kind, amount in action.demand.items())
                for g in groups
            ):
                raise WorkloadError(
                    f"{at}.demand: larger than every node running {action.executor!r}"
                )
            elasticity = action.elasticity
            if elasticity.max_units < elasticity.min_units:
                raise WorkloadError(f"{at}.elasticity.max_units: below min_units")
            if action.may_shrink_gpus and not (
                elasticity.unit_kind == "gpu" and action.demand.get("gpu") == elasticity.min_units
            ):
                raise WorkloadError(
                    f"{at}.may_shrink_gpus: only for one GPU a unit (elasticity unit_kind "
                    "gpu, demand gpu equal to min_units)"
                )
        if not task.actions and task.reward is None:
            raise WorkloadError(f"{where}: has neither actions nor a reward")
        if task.reward is None and task.turns.expected() <= 0:
            raise WorkloadError(f"{where}.turns: none and no reward, so it runs no action")


def load_workload(path: str | Path) -> Workload:
    """The workload in the YAML file at ``path``; ``WorkloadError`` says what is wrong where."""
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as exc:
        raise WorkloadError(f"{path}: {exc}") from exc
    try:
        return workload_from_dict(raw)
    except WorkloadError as exc:
        raise WorkloadError(f"{path}: {exc}") from exc
