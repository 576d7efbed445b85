"""Every policy on one workload, same seeds, and the comparison table.

    python -m bench.policy fixtures/workloads/mixed.yaml --seeds 1,2,3
    python -m bench.policy fixtures/workloads/mixed.yaml --seeds 1,2,3 --savings
    python -m bench.policy fixtures/workloads/mixed.yaml --format json
    python -m bench.policy fixtures/workloads/mixed.yaml --ablations
    python -m bench.policy fixtures/workloads/longtail.yaml --hints 0.5
    python -m bench.policy fixtures/workloads/protect.yaml --remaining-hints 1
    python -m bench.policy fixtures/workloads/gpuburst.yaml --by-type
    python -m bench.policy fixtures/workloads/rm.yaml --by-step

Metrics pool all seeds' actions and steps; ``min_ratio`` columns are the worst
seed, so a ratio that holds there holds on every seed. ``--savings`` bisects
the pool scale (every node group by the same factor) for the smallest pool on
which ``tangram``'s mean step time is at most ``static``'s on the full pool.
``--hints CV`` has the clients hint every action's run time, off by a
lognormal factor of mean 1 and that coefficient of variation (0: exact);
``--remaining-hints CV`` has them hint, with each action, what its trajectory
will still run after it (``remaining_hint_s``), off likewise.
``--by-type`` tells where each action type's ACT went: its mean wait in the
queue (the rest is setup, start and run) and the units it ended on (the JSON
has these always, as ``by_type``); ``--by-step`` the same in each step of its
task, where a cold start shows in the first (``by_step``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

from tangram_policy.registry import ABLATIONS, POLICIES
from tangram_sim.bound import capacity, saving_pct
from tangram_sim.sim import PolicyError, SimResult, Simulation, TypeTotals, quantile, simulate
from tangram_sim.workload import Workload, WorkloadError, load_workload

BASELINES = ("static", "partitioned", "fifo")
DEFAULT_POLICIES = (*BASELINES, "tangram")
#: Kinds the tables leave out: sizes held beside the units that are scheduled.
UNSHOWN_KINDS = ("memory", "gpu_memory")


def aggregate(results: list[SimResult]) -> dict[str, Any]:
    acts = sorted(a for r in results for a in r.acts)
    steps = [s for r in results for s in r.steps]
    summaries = [r.summary() for r in results]
    kinds = sorted({k for s in summaries for k in s["resource_hours"]})

    def mean_of(key: str, kind: str | None = None) -> float:
        values = [s[key][kind] if kind else s[key] for s in summaries]
        return sum(values) / len(values)

    types: dict[tuple[str, str], TypeTotals] = {}
    steps_of_types: dict[tuple[str, str, int], TypeTotals] = {}
    for result in results:
        for key, totals in result.type_totals.items():
            types.setdefault(key, TypeTotals()).pool(totals)
        for step_key, totals in result.step_totals.items():
            steps_of_types.setdefault(step_key, TypeTotals()).pool(totals)
    shortfall: dict[str, dict[str, float]] = {}
    for result in results:
        for tenant, by_kind in result.shortfall.items():
            pooled_short = shortfall.setdefault(tenant, {})
            for kind, unit_s in by_kind.items():
                pooled_short[kind] = pooled_short.get(kind, 0.0) + unit_s / len(results)
    tenants: dict[str, tuple[float, int]] = {}
    for (tenant, _), totals in types.items():
        was_total, was_count = tenants.get(tenant, (0.0, 0))
        tenants[tenant] = (was_total + totals.act_s, was_count + totals.actions)
    return {
        "mean_act_s": sum(acts) / len(acts) if acts else 0.0,
        "mean_act_by_tenant_s": {t: total / count for t, (total, count) in sorted(tenants.items())},
        "guarantee_shortfall_unit_s": {
            tenant: dict(sorted(by_kind.items())) for tenant, by_kind in sorted(shortfall.items())
        },
        "by_type": [
            {"tenant": tenant, "type": type_, **_means(totals)}
            for (tenant, type_), totals in sorted(types.items())
        ],
        "by_step": [
            {"tenant": tenant, "type": type_, "step": step + 1, **_means(totals)}
            for (tenant, type_, step), totals in sorted(steps_of_types.items())
        ],
        "p50_act_s": quantile(acts, 0.50),
        "p95_act_s": quantile(acts, 0.95),
        "p99_act_s": quantile(acts, 0.99),
        "mean_step_s": sum(steps) / len(steps) if steps else 0.0,
        "resource_hours": {k: mean_of("resource_hours", k) for k in kinds},
        "busy_hours": {k: mean_of("busy_hours", k) for k in kinds},
        "utilisation": mean_of("utilisation"),
        "makespan_s": mean_of("makespan_s"),
        "actions": len(acts),
        "steps": len(steps),
        "per_seed": [
            {"seed": r.seed, "mean_act_s": s["mean_act_s"], "mean_step_s": s["mean_step_s"]}
            for r, s in zip(results, summaries, strict=True)
        ],
    }


def _means(totals: TypeTotals) -> dict[str, Any]:
    return {
        "actions": totals.actions,
        "mean_act_s": totals.act_s / totals.actions,
        "mean_wait_s": totals.wait_s / totals.actions,
        "mean_units": totals.units / totals.actions,
    }


def ratios(policies: dict[str, dict[str, Any]], ours: str = "tangram") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ours not in policies:
        return out
    mine = policies[ours]
    for base in policies:
        if base == ours:
            continue
        theirs = policies[base]
        per_seed_act = [
            b["mean_act_s"] / m["mean_act_s"]
            for b, m in zip(theirs["per_seed"], mine["per_seed"], strict=True)
            if m["mean_act_s"] > 0
        ]
        per_seed_step = [
            b["mean_step_s"] / m["mean_step_s"]
            for b, m in zip(theirs["per_seed"], mine["per_seed"], strict=True)
            if m["mean_step_s"] > 0
        ]
        out[f"{ours}_vs_{base}"] = {
            "mean_act": theirs["mean_act_s"] / mine["mean_act_s"] if mine["mean_act_s"] else 0.0,
            "mean_step": theirs["mean_step_s"] / mine["mean_step_s"]
            if mine["mean_step_s"]
            else 0.0,
            "min_seed_mean_act": min(per_seed_act, default=0.0),
            "min_seed_mean_step": min(per_seed_step, default=0.0),
        }
    return out


def _simulate(workload: Workload, policy: str) -> SimResult:
    try:
        return simulate(workload, policy)
    except PolicyError as error:
        raise PolicyError(f"{workload.name}, seed {workload.seed}: {error}") from None


def run_policies(
    workload: Workload,
    names: list[str],
    seeds: list[int],
    executor: Executor,
    *,
    leave_out_stuck: bool = False,
) -> dict[str, dict[str, Any]]:
    """Every (policy, seed) run as its own job: runs are independent and CPU-bound.

    With ``leave_out_stuck``, a policy that leaves actions never placed on some
    seed is left out of the result instead of raising its ``PolicyError``.
    """
    runs = {
        name: [executor.submit(_simulate, workload.with_seed(seed), name) for seed in seeds]
        for name in names
    }
    out: dict[str, dict[str, Any]] = {}
    for name, futures in runs.items():
        try:
            out[name] = aggregate([f.result() for f in futures])
        except PolicyError:
            if not leave_out_stuck:
                raise
    return out


def _steps_within(workload: Workload, policy: str, limit: float | None) -> list[float] | None:
    """The run's step times, or None once simulated time passes ``limit``."""
    simulation = Simulation(workload, policy, time_limit_s=limit)
    result = simulation.run()
    return None if simulation.truncated else result.steps


def mean_step(
    workload: Workload,
    policy: str,
    seeds: list[int],
    executor: Executor,
    give_up_above_s: float | None = None,
) -> float:
    """Mean step time over the seeds; ``inf`` once it surely exceeds ``give_up_above_s``.

    A mean at most T over n steps means no task's steps sum past n x T, so a run
    whose simulated time passes that (plus the latest task start) can stop.
    """
    limit = None
    if give_up_above_s is not None:
        steps_per_seed = sum(task.steps for task in workload.tasks)
        latest = max((task.start_s for task in workload.tasks), default=0.0)
        limit = give_up_above_s * steps_per_seed + latest
    futures = [
        executor.submit(_steps_within, workload.with_seed(seed), policy, limit) for seed in seeds
    ]
    steps: list[float] = []
    for future in futures:
        seed_steps = future.result()
        if seed_steps is None:
            return float("inf")
        steps += seed_steps
    return sum(steps) / len(steps)


def savings(
    workload: Workload,
    seeds: list[int],
    target_s: float,
    executor: Executor,
    *,
    iterations: int = 7,
) -> dict[str, Any]:
    """Smallest pool scale at which ``tangram`` matches ``static``'s full-pool mean step."""
    low, high = 0.0, 1.0
    probes: list[dict[str, float]] = []
    high_step = mean_step(workload, "tangram", seeds, executor)
    probes.append({"scale": 1.0, "mean_step_s": high_step})
    if high_step > target_s:
        return {"target_step_s": target_s, "scale": None, "saving_pct": 0.0, "probes": probes}
    for _ in range(iterations):
        middle = (low + high) / 2.0
        try:
            step = mean_step(
                workload.scaled(middle), "tangram", seeds, executor, give_up_above_s=target_s
            )
        except (RuntimeError, ValueError):
            step = float("inf")
        probes.append({"scale": middle, "mean_step_s": step})
        if step <= target_s:
            high = middle
        else:
            low = middle
    full = capacity(workload)
    small = capacity(workload.scaled(high))
    by_kind = {k: 100.0 * (1.0 - small.get(k, 0.0) / v) for k, v in full.items() if v > 0}
    return {
        "target_step_s": target_s,
        "scale": high,
        "saving_pct": saving_pct(full, small, default=100.0 * (1.0 - high)),
        "saving_pct_by_kind": by_kind,
        "probes": probes,
    }


def _hours(value: dict[str, float]) -> str:
    shown = {k: v for k, v in value.items() if k not in UNSHOWN_KINDS}
    return " ".join(f"{k}={v:.1f}" for k, v in shown.items())


def table(report: dict[str, Any], by_type: bool = False, by_step: bool = False) -> str:
    policies: dict[str, dict[str, Any]] = report["policies"]
    lines = [
        f"workload {report['workload']}  seeds {report['seeds']}",
        "",
        f"{'policy':<24}{'mean ACT':>10}{'p50':>9}{'p95':>9}{'p99':>9}{'step':>9}"
        f"{'util':>7}  resource-hours",
    ]
    for name, m in policies.items():
        lines.append(
            f"{name:<24}{m['mean_act_s']:>10.2f}{m['p50_act_s']:>9.2f}{m['p95_act_s']:>9.2f}"
            f"{m['p99_act_s']:>9.2f}{m['mean_step_s']:>9.1f}{m['utilisation']:>7.2f}  "
            f"{_hours(m['resource_hours'])}"
        )
    tenants = sorted({t for m in policies.values() for t in m["mean_act_by_tenant_s"]})
    if len(tenants) > 1:  # who gains and who pays: quotas trade one tenant's wait for another's
        lines += ["", f"{'mean ACT by tenant':<24}" + "".join(f"{t:>14}" for t in tenants)]
        for name, m in policies.items():
            by_tenant = m["mean_act_by_tenant_s"]
            lines.append(
                f"{name:<24}" + "".join(f"{by_tenant.get(t, 0.0):>14.2f}" for t in tenants)
            )
        lines += _shortfall_lines(policies)
    if by_type:
        lines += ["", *_type_lines(policies)]
    if by_step:
        lines += ["", *_type_lines(policies, by_step=True)]
    if report["ratios"]:
        lines += ["", f"{'ratio (baseline / tangram)':<34}{'ACT':>8}{'worst seed':>12}"]
        lines[-1] += f"{'step':>8}{'worst seed':>12}"
        for name, r in report["ratios"].items():
            lines.append(
                f"{name:<34}{r['mean_act']:>8.2f}{r['min_seed_mean_act']:>12.2f}"
                f"{r['mean_step']:>8.2f}{r['min_seed_mean_step']:>12.2f}"
            )
    if "savings" in report:
        s = report["savings"]
        lines += [""]
        if s["scale"] is None:
            lines.append(f"savings: tangram does not reach static's {s['target_step_s']:.1f}s")
        else:
            kinds = " ".join(
                f"{k}={v:.1f}%"
                for k, v in s["saving_pct_by_kind"].items()
                if k not in UNSHOWN_KINDS
            )
            lines.append(
                f"savings: tangram on {s['scale']:.3f} of the pool matches static's full-pool "
                f"mean step ({s['target_step_s']:.1f}s): {s['saving_pct']:.1f}% fewer "
                f"resources ({kinds})"
            )
    lines.append(f"\n({report['wall_s']:.1f}s)")
    return "\n".join(lines)


def _shortfall_lines(policies: dict[str, dict[str, Any]]) -> list[str]:
    """Per policy and tenant, the unit-seconds of its guarantee it asked for while others
    held it (mean over seeds; memory left out): a mean ACT bought by taking from a
    guaranteed tenant shows here."""
    short = {name: m["guarantee_shortfall_unit_s"] for name, m in policies.items()}
    tenants = sorted({t for by_tenant in short.values() for t in by_tenant})
    if not tenants:
        return []
    lines = ["", f"{'guarantee short, unit-s':<24}" + "".join(f"{t:>14}" for t in tenants)]
    for name, by_tenant in short.items():
        cells = []
        for tenant in tenants:
            by_kind = by_tenant.get(tenant, {}).items()
            shown = [f"{k} {v:.0f}" for k, v in by_kind if k not in UNSHOWN_KINDS]
            cells.append(" ".join(shown) or "0")
        lines.append(f"{name:<24}" + "".join(f"{cell:>14}" for cell in cells))
    return lines


def _type_lines(policies: dict[str, dict[str, Any]], by_step: bool = False) -> list[str]:
    """Per action type (and step of its task) and policy: mean ACT / mean wait, and
    units at the end (``xU``)."""
    rows: dict[tuple[str, str, int], dict[str, dict[str, Any]]] = {}
    for name, m in policies.items():
        for row in m["by_step" if by_step else "by_type"]:
            rows.setdefault((row["tenant"], row["type"], row.get("step", 0)), {})[name] = row

    def name_of(tenant: str, type_: str, step: int) -> str:
        return f"{tenant} {type_} step {step}" if by_step else f"{tenant} {type_}"

    label = max([len(f"{name_of(*key)} (000000)") for key in rows] + [36])
    header = "mean ACT / wait s, xunits" + (" by step" if by_step else "")
    lines = [f"{header:<{label}}" + "".join(f"{name:>23}" for name in policies)]
    for key, cells in sorted(rows.items()):
        count = max(row["actions"] for row in cells.values())
        line = f"{f'{name_of(*key)} ({count})':<{label}}"
        for name in policies:
            row = cells.get(name)
            line += (
                f"{row['mean_act_s']:>9.2f} /{row['mean_wait_s']:>6.2f} x{row['mean_units']:<4.2f}"
                if row
                else f"{'-':>23}"
            )
        lines.append(line)
    return lines


def parse_workload(parser: argparse.ArgumentParser, path: str) -> Workload:
    """The workload at ``path``, or the parser's usage error naming what is wrong (exit 2)."""
    try:
        return load_workload(path)
    except WorkloadError as error:
        parser.error(str(error))


def parse_seeds(parser: argparse.ArgumentParser, text: str) -> list[int]:
    """``--seeds`` as integers, or the parser's usage error (exit 2)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds:
        parser.error(f"--seeds: expected comma-separated integers, got {text!r}")
    return seeds


def add_hint_flags(parser: argparse.ArgumentParser) -> None:
    """``--hints CV`` and ``--remaining-hints CV``, read back by ``hint_cvs``."""
    parser.add_argument(
        "--hints", type=float, metavar="CV", help="clients hint run times to within this cv"
    )
    parser.add_argument(
        "--remaining-hints",
        type=float,
        metavar="CV",
        help="clients hint what each trajectory runs after each action to within this cv",
    )


def hint_cvs(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[float | None, float | None]:
    """The cvs ``add_hint_flags`` read, for ``Workload.with_hints``; exit 2 on one below 0."""
    for flag, cv in (("--hints", args.hints), ("--remaining-hints", args.remaining_hints)):
        if cv is not None and cv < 0:
            parser.error(f"{flag}: expected a coefficient of variation >= 0, got {cv:g}")
    return args.hints, args.remaining_hints


def add_round_interval_flag(parser: argparse.ArgumentParser) -> None:
    """``--round-interval S``, read back by ``round_interval``."""
    parser.add_argument(
        "--round-interval",
        type=float,
        metavar="S",
        help="decide at most once per S seconds (the workload's sim.round_interval_s)",
    )


def round_interval(parser: argparse.ArgumentParser, args: argparse.Namespace) -> float | None:
    """The ``--round-interval`` asked for, if any; exit 2 on one below 0."""
    if args.round_interval is not None and args.round_interval < 0:
        parser.error(f"--round-interval: expected 0 or more, got {args.round_interval:g}")
    return args.round_interval


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.policy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workload")
    parser.add_argument("--seeds", default="1", help="comma-separated, e.g. 1,2,3")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument("--ablations", action="store_true", help="add tangram-no-<mechanism>")
    parser.add_argument("--savings", action="store_true")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    add_hint_flags(parser)
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="simulations run in parallel"
    )
    parser.add_argument(
        "--by-type", action="store_true", help="also each action type's mean ACT, wait and units"
    )
    parser.add_argument(
        "--by-step", action="store_true", help="also those in each step of the type's task"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    workload = parse_workload(parser, args.workload)
    workload = workload.with_hints(*hint_cvs(parser, args))
    seeds = parse_seeds(parser, args.seeds)
    names = [p for p in args.policies.split(",") if p]
    known = sorted({*BASELINES, *POLICIES})
    if not names or any(name not in known for name in names):
        parser.error(f"--policies: expected some of {known}, got {args.policies!r}")
    if args.ablations:
        names += [f"tangram-no-{m.replace('_', '-')}" for m in ABLATIONS]
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as executor:
        try:
            policies = run_policies(workload, names, seeds, executor)
        except PolicyError as error:
            print(f"bench.policy: {error}", file=sys.stderr)
            return 1
        report: dict[str, Any] = {
            "workload": workload.name,
            "seeds": seeds,
            "policies": policies,
            "ratios": ratios(policies),
        }
        if args.savings:
            target = (
                policies["static"]["mean_step_s"]
                if "static" in policies
                else mean_step(workload, "static", seeds, executor)
            )
            report["savings"] = savings(workload, seeds, target, executor)
    report["wall_s"] = time.perf_counter() - started
    if args.format == "json":
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(table(report, by_type=args.by_type, by_step=args.by_step))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
