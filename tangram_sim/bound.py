"""What no policy can beat on a workload: every action starting the moment it is
submitted, warm, on its most units.

An action's ACT is at least its sandbox start plus its run on its most units
(Amdahl), whatever waits, setups or batches add; a step lasts at least its
longest trajectory's think times and such actions, plus the trainer's time.
Every policy replays the same trajectories (``draw_trajectory``), so these
floors bound every policy's mean ACT and mean step on the workload, and
``static``'s means over them bound any policy's ratio against ``static``: where
that ratio is under a target, no scheduler meets it there.
"""

from __future__ import annotations

from dataclasses import dataclass

from tangram_policy.estimate import speedup
from tangram_sim.workload import ActionType, Workload, draw_trajectory


@dataclass(frozen=True, slots=True)
class Floor:
    """Sums over a run's actions and steps, so that seeds pool as the bench pools them."""

    act_s: float
    actions: int
    step_s: float
    steps: int

    @property
    def mean_act_s(self) -> float:
        return self.act_s / self.actions if self.actions else 0.0

    @property
    def mean_step_s(self) -> float:
        return self.step_s / self.steps if self.steps else 0.0

    def __add__(self, other: Floor) -> Floor:
        return Floor(
            self.act_s + other.act_s,
            self.actions + other.actions,
            self.step_s + other.step_s,
            self.steps + other.steps,
        )


def action_floor_s(action: ActionType, run_s: float) -> float:
    """The shortest ACT of an action that runs ``run_s`` at its minimum units."""
    return action.start_s + run_s / speedup(action.elasticity, action.elasticity.max_units)


def no_wait_floor(workload: Workload) -> Floor:
    """The floors of ``workload`` at its seed: per action and per step (see the module)."""
    act_s = 0.0
    actions = 0
    step_s = 0.0
    steps = 0
    for task in workload.tasks:
        for step in range(task.steps):
            longest = 0.0
            for index in range(task.trajectories):
                turns, reward_s = draw_trajectory(workload.seed, task, step, index)
                trajectory_s = 0.0
                for think_s, action, run_s in turns:
                    floor_s = action_floor_s(action, run_s)
                    trajectory_s += think_s + floor_s
                    act_s += floor_s
                    actions += 1
                if task.reward is not None and reward_s >= 0:
                    floor_s = action_floor_s(task.reward, reward_s)
                    trajectory_s += floor_s
                    act_s += floor_s
                    actions += 1
                longest = max(longest, trajectory_s)
            step_s += longest + task.train_s
            steps += 1
    return Floor(act_s, actions, step_s, steps)
