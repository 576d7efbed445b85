"""How far tangram's results move with its settings: each variant against the defaults.

    python -m bench.sensitivity $(ls fixtures/workloads/*.yaml | grep -v scale)
    python -m bench.sensitivity fixtures/workloads/mixed.yaml --vary aging_rate=0.125,0.5,1

A variant changes one numeric ``TangramConfig`` setting (``--vary NAME=V1,V2``,
repeatable; by default each of ``DEFAULT_VARIANTS``). Every workload runs
under the defaults and under each variant on the same seeds. Each figure is
the default's mean ACT or mean step over the variant's (above 1: the variant
does better): first a line a variant with the geometric mean over the
workloads, the worst and the best, then a table a metric with every
workload's default value and its figure under each variant. A setting
whose variants all stay near 1 is one the results do not hang on; one that
wins on some workloads and loses on others is a trade, not a better default.
"""

from __future__ import annotations

import argparse
import math
import os
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import fields, replace
from typing import Any

from bench.policy import aggregate, parse_seeds, parse_workload
from tangram_policy.tangram import TangramConfig, TangramPolicy
from tangram_sim.sim import SimResult, simulate
from tangram_sim.workload import Workload

DEFAULT_VARIANTS: dict[str, tuple[float, ...]] = {
    "aging_rate": (0.125, 0.5, 1.0),
    "starvation_s": (150.0, 600.0),
    "headroom": (0.0, 0.05),
    "min_gain": (0.02, 0.1),
}
#: The settings a variant may change: TangramConfig's numbers (the rest are ablations).
NUMERIC = tuple(f.name for f in fields(TangramConfig) if f.type in ("float", float))

Variant = tuple[str, float]


def _run(workload: Workload, variant: Variant | None) -> SimResult:
    config = (
        TangramConfig() if variant is None else replace(TangramConfig(), **{variant[0]: variant[1]})
    )
    return simulate(workload, TangramPolicy(config))


def label(variant: Variant) -> str:
    return f"{variant[0]}={variant[1]:g}"


def measure(
    workload: Workload, variants: list[Variant], seeds: list[int], executor: Executor
) -> dict[str, dict[str, Any]]:
    """The defaults' and each variant's pooled results on ``workload`` (by label)."""
    runs: dict[str, list[Future[SimResult]]] = {
        name: [executor.submit(_run, workload.with_seed(seed), variant) for seed in seeds]
        for name, variant in [("default", None), *((label(v), v) for v in variants)]
    }
    return {name: aggregate([f.result() for f in futures]) for name, futures in runs.items()}


METRICS = (("mean_act_s", "mean ACT"), ("mean_step_s", "mean step"))


def ratio(default: float, variant: float) -> float:
    """The default's value over the variant's: above 1, the variant does better."""
    if variant <= 0:
        return 1.0 if default <= 0 else math.inf
    return default / variant


def summary(rows: dict[str, dict[str, dict[str, Any]]], variants: list[Variant]) -> str:
    """A line a variant: per metric, the geometric mean over the workloads, worst and best."""
    head = f"{'variant':20s}"
    for _, title in METRICS:
        head += f"{title + ' geo':>14s}  {'worst':26s}{'best':26s}"
    out = [head.rstrip()]
    for variant in variants:
        name = label(variant)
        line = f"{name:20s}"
        for metric, _ in METRICS:
            by_workload = {
                workload: ratio(results["default"][metric], results[name][metric])
                for workload, results in rows.items()
            }
            geo = math.exp(sum(math.log(r) for r in by_workload.values()) / len(by_workload))
            worst = min(by_workload, key=lambda w: by_workload[w])
            best = max(by_workload, key=lambda w: by_workload[w])
            line += f"{geo:>14.3f}  {f'{by_workload[worst]:.3f} ({worst})':26s}"
            line += f"{f'{by_workload[best]:.3f} ({best})':26s}"
        out.append(line.rstrip())
    return "\n".join(out)


def matrix(rows: dict[str, dict[str, dict[str, Any]]], variants: list[Variant]) -> str:
    """Per metric, a workload a line: the default's value, then default / variant."""
    names = [label(v) for v in variants]
    width = max([10, *(len(n) + 2 for n in names)])
    first = max([26, *(len(w) + 2 for w in rows)])
    out = []
    for metric, title in METRICS:
        out.append(f"{title:{first}s}{'default':>10s}" + "".join(f"{n:>{width}s}" for n in names))
        for workload, results in rows.items():
            base = results["default"][metric]
            cells = "".join(f"{ratio(base, results[n][metric]):>{width}.3f}" for n in names)
            out.append(f"{workload:{first}s}{base:>10.2f}" + cells)
        out.append("")
    return "\n".join(out).rstrip("\n")


def parse_vary(parser: argparse.ArgumentParser, texts: list[str]) -> list[Variant]:
    variants: list[Variant] = []
    for text in texts:
        name, _, values = text.partition("=")
        if name not in NUMERIC:
            parser.error(
                f"--vary: {name!r} is not a numeric setting; choose one of {list(NUMERIC)}"
            )
        try:
            numbers = [float(value) for value in values.split(",")]
        except ValueError:
            parser.error(f"--vary: expected {name}=V1,V2,..., got {text!r}")
        for number in numbers:
            if number < 0 or not math.isfinite(number):
                parser.error(f"--vary: {name} must be a finite number >= 0, got {number:g}")
            variants.append((name, number))
    return variants


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sensitivity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workloads", nargs="+", help="workload YAML files")
    parser.add_argument(
        "--vary", action="append", default=[], metavar="NAME=V1,V2", help="a setting and its values"
    )
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated, e.g. 1,2,3")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="simulations run in parallel"
    )
    args = parser.parse_args(argv)
    seeds = parse_seeds(parser, args.seeds)
    variants = parse_vary(parser, args.vary) or [
        (name, value) for name, values in DEFAULT_VARIANTS.items() for value in values
    ]
    workloads = [parse_workload(parser, path) for path in args.workloads]
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as executor:
        rows = {w.name: measure(w, variants, seeds, executor) for w in workloads}
    seeds_text = ",".join(map(str, seeds))
    print(f"tangram, seeds {seeds_text}: default / variant (above 1: the variant does better)\n")
    print(summary(rows, variants))
    print()
    print(matrix(rows, variants))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
