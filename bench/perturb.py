"""Do the targets survive a workload we did not tune on? Variants of one, judged.

    python -m bench.perturb fixtures/workloads/swe.yaml
    python -m bench.perturb WORKLOAD --variants 8 --seed 1 --spread 1.6 --seeds 1,2 [--savings]

Each variant multiplies five of the workload's numbers by its own factor,
drawn log-uniformly in [1/spread, spread]: the pool (every node group), the
trajectories per step, the LLM think time, the action durations and the setup
(image pull, model load) times. ``bench.targets`` then judges it (``static``,
``partitioned``, ``fifo`` and ``tangram`` on the same seeds). Prints one row a
variant with its factors, and how many meet every target. Variants depend only
on ``--seed``: the same command gives the same variants.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from bench.policy import parse_seeds, parse_workload
from bench.targets import HEAD, line, summary, verdict
from tangram_sim.workload import ActionType, Dist, Workload

FACTORS = ("pool", "trajectories", "think", "duration", "setup")


def _scaled(dist: Dist, factor: float) -> Dist:
    return replace(
        dist,
        value=dist.value * factor,
        low=dist.low * factor,
        high=dist.high * factor,
        mean=dist.mean * factor,
    )


def _action(action: ActionType, factors: dict[str, float]) -> ActionType:
    return replace(
        action,
        duration_s=_scaled(action.duration_s, factors["duration"]),
        setup_s=action.setup_s * factors["setup"],
    )


def variant(workload: Workload, factors: dict[str, float], name: str) -> Workload:
    """``workload`` with each of ``FACTORS`` multiplied by its factor."""
    tasks = tuple(
        replace(
            task,
            trajectories=max(1, round(task.trajectories * factors["trajectories"])),
            think_s=_scaled(task.think_s, factors["think"]),
            actions=tuple(_action(a, factors) for a in task.actions),
            reward=_action(task.reward, factors) if task.reward is not None else None,
        )
        for task in workload.tasks
    )
    return replace(workload.scaled(factors["pool"]), tasks=tasks, name=name)


def draw_factors(rng: random.Random, spread: float) -> dict[str, float]:
    bound = math.log(spread)
    return {key: round(math.exp(rng.uniform(-bound, bound)), 2) for key in FACTORS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.perturb",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workload")
    parser.add_argument("--variants", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1, help="draws the variants' factors")
    parser.add_argument("--spread", type=float, default=1.6, help="factors in [1/S, S]")
    parser.add_argument("--seeds", default="1,2", help="simulation seeds, e.g. 1,2,3")
    parser.add_argument("--savings", action="store_true", help="also bisect the pool (slow)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    workload = parse_workload(parser, args.workload)
    if args.variants < 1:
        parser.error(f"--variants: expected at least 1, got {args.variants}")
    if args.spread < 1:
        parser.error(f"--spread: expected at least 1, got {args.spread:g}")
    seeds = parse_seeds(parser, args.seeds)
    rng = random.Random(args.seed)
    print(HEAD, flush=True)
    rows = []
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as executor:
        for number in range(args.variants):
            factors = draw_factors(rng, args.spread)
            name = f"{workload.name}-{number}"
            row = verdict(
                variant(workload, factors, name), seeds, executor, with_savings=args.savings
            )
            rows.append(row)
            print(line(row), flush=True)
            print(" " * 14 + "  ".join(f"{k} x{v:g}" for k, v in factors.items()), flush=True)
    print(summary(rows))
    return 0 if all(not row["missed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
