"""The simulator at scale: a workload through one policy, timed.

python -m bench.scale fixtures/workloads/scale.yaml            # ~1M actions, 10k nodes
python -m bench.scale fixtures/workloads/scale.yaml --policy fifo
"""

from __future__ import annotations

import argparse
import time

from bench.policy import parse_workload
from tangram_sim.sim import Simulation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workload")
    parser.add_argument("--policy", default="tangram")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    workload = parse_workload(parser, args.workload)
    if args.seed is not None:
        workload = workload.with_seed(args.seed)
    started = time.perf_counter()
    simulation = Simulation(workload, args.policy)
    result = simulation.run()
    wall = time.perf_counter() - started
    summary = result.summary()
    print(
        f"{workload.name}: {summary['actions']} actions on {len(simulation.nodes)} nodes "
        f"through {args.policy}: {wall:.1f}s wall, {summary['rounds']} rounds, "
        f"{summary['actions'] / wall:.0f} actions/s; mean ACT {summary['mean_act_s']:.2f}s, "
        f"p99 {summary['p99_act_s']:.2f}s, mean step {summary['mean_step_s']:.1f}s, "
        f"simulated {summary['makespan_s']:.0f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
