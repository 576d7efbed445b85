"""Does tangram still beat fifo and partitioned when the pool shrinks? Every
workload given, on smaller (or larger) pools, judged against them.

    python -m bench.pools $(ls fixtures/workloads/*.yaml | grep -v scale)
    python -m bench.pools fixtures/workloads/bursty.yaml --scales 0.35,0.6 --seeds 1,2,3
    python -m bench.pools fixtures/workloads/swe.yaml --factor think --scales 0.5,2
    python -m bench.pools fixtures/workloads/swe.yaml --scales 1 --round-interval 1

Each scale multiplies every node group's count (whole nodes, then one partial
node, as ``--savings`` does). The targets hold the pool fixed and bisect it only
for the step; this asks whether the policy's order, placement and elasticity
keep paying when the pool is contended more than the workload was written for.
Prints one row per (workload, scale): tangram's mean ACT and step against
fifo's and partitioned's, pooled and on the worst seed, and lists the rows
where tangram's mean ACT is behind either.

``--factor`` scales another of ``bench.perturb``'s numbers instead of the
pool, one at a time, on the pool as written: the LLM think times (0.5: the
same work arrives twice as densely), the setup times, the trajectories per
step or the action durations. ``--round-interval S`` has every policy decide
at most once per S seconds, as a scheduler on a timer would, instead of at
every instant with events.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from bench.perturb import FACTORS, variant
from bench.policy import (
    add_round_interval_flag,
    parse_seeds,
    parse_workload,
    ratios,
    round_interval,
    run_policies,
)

POLICIES = ["partitioned", "fifo", "tangram"]
SCALED = {  # what --factor multiplies, besides the pool
    "trajectories": "the trajectories per step",
    "think": "the LLM think times",
    "duration": "the action durations",
    "setup": "the setup times",
}
HEAD = (
    f"{'workload':<16}{'scale':>6}{'ACT vs fifo':>16}{'vs partitioned':>16}"
    f"{'step vs fifo':>16}{'vs partitioned':>16}"
)


def _cell(ratio: dict[str, Any] | None, metric: str) -> str:
    if ratio is None:
        return "stuck"
    return f"{ratio[metric]:.2f} ({ratio['min_seed_' + metric]:.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pools",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--scales", default="0.35,0.45,0.6,0.8", help="e.g. 0.5,0.8,1.5")
    parser.add_argument(
        "--factor", default="pool", choices=FACTORS, help="the number the scales multiply"
    )
    add_round_interval_flag(parser)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated, e.g. 1,2,3")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    seeds = parse_seeds(parser, args.seeds)
    try:
        scales = [float(part) for part in args.scales.split(",")]
    except ValueError:
        parser.error(f"--scales: expected comma-separated numbers, got {args.scales!r}")
    if any(scale <= 0 for scale in scales):
        parser.error(f"--scales: expected every scale above 0, got {args.scales!r}")
    interval = round_interval(parser, args)
    workloads = [parse_workload(parser, path) for path in args.workloads]
    if interval is not None:
        workloads = [replace(w, round_interval_s=interval) for w in workloads]
        print(f"one round at most every {interval:g} s", flush=True)
    if args.factor != "pool":
        print(f"each scale multiplies {SCALED[args.factor]}; the pool is as written", flush=True)
    print(HEAD, flush=True)
    unscaled = dict.fromkeys(FACTORS, 1.0)
    behind = []
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as executor:
        for workload in workloads:
            for scale in scales:
                scaled = variant(workload, {**unscaled, args.factor: scale}, workload.name)
                results = run_policies(scaled, POLICIES, seeds, executor, leave_out_stuck=True)
                if "tangram" not in results:
                    print(f"{workload.name:<16}{scale:>6g}  tangram left actions never placed")
                    behind.append(f"{workload.name} at {scale:g} (stuck)")
                    continue
                against = ratios(results)
                fifo = against.get("tangram_vs_fifo")
                partitioned = against.get("tangram_vs_partitioned")
                print(
                    f"{workload.name:<16}{scale:>6g}{_cell(fifo, 'mean_act'):>16}"
                    f"{_cell(partitioned, 'mean_act'):>16}{_cell(fifo, 'mean_step'):>16}"
                    f"{_cell(partitioned, 'mean_step'):>16}",
                    flush=True,
                )
                if any(r is not None and r["min_seed_mean_act"] < 1.0 for r in (fifo, partitioned)):
                    behind.append(f"{workload.name} at {scale:g}")
    print(
        "ratios: baseline / tangram, pooled (worst seed); above 1 tangram is ahead;"
        " stuck: the baseline leaves actions never placed on that pool\n"
        f"mean ACT behind fifo or partitioned on some seed: {', '.join(behind) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
