"""What a lending limit trades: the lender's wait against the borrowers'.

    python -m bench.lending fixtures/workloads/reclaim.yaml --tenant team-code
    python -m bench.lending WORKLOAD --tenant T --kind cpu --limits 32,16,8,0 --seeds 1,2,3

Runs ``tangram`` on the workload once per lending limit given to ``--tenant``'s
guarantee of ``--kind`` (``all``: the workload as written, no limit), and
``partitioned`` as the reference a limit of 0 should approach. Prints, pooled
over the seeds, the mean ACT and step, and how long actions wait (start minus
submit) of that tenant and of every other one: mean and p95.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from bench.policy import parse_seeds, parse_workload
from tangram_sim.sim import PolicyError, Simulation, quantile
from tangram_sim.workload import Workload

NO_LIMIT = "all"


def with_lending_limit(workload: Workload, tenant: str, kind: str, limit: float) -> Workload:
    quotas = dict(workload.quotas)
    quota = quotas[tenant]
    quotas[tenant] = replace(quota, lending_limit={**quota.lending_limit, kind: limit})
    return replace(workload, quotas=quotas)


def _run(workload: Workload, policy: str, tenant: str) -> dict[str, list[float]]:
    result = Simulation(workload, policy, keep_records=True).run()
    waits: dict[str, list[float]] = {"lender": [], "others": []}
    for record in result.records:
        side = "lender" if record.tenant == tenant else "others"
        waits[side].append(record.started - record.submitted)
    return {"acts": result.acts, "steps": result.steps, **waits}


def _row(label: str, runs: list[dict[str, list[float]]]) -> str:
    pooled = {key: sorted(v for run in runs for v in run[key]) for key in runs[0]}

    def mean(key: str) -> float:
        values = pooled[key]
        return sum(values) / len(values) if values else 0.0

    return (
        f"{label:<24}{mean('acts'):>9.2f}{mean('steps'):>9.1f}"
        f"{mean('lender'):>10.2f}{quantile(pooled['lender'], 0.95):>8.2f}"
        f"{mean('others'):>10.2f}{quantile(pooled['others'], 0.95):>8.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lending",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workload")
    parser.add_argument("--tenant", required=True, help="the lender")
    parser.add_argument("--kind", default="cpu")
    parser.add_argument("--limits", default=f"{NO_LIMIT},16,8,0", help=f"numbers or {NO_LIMIT}")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    workload = parse_workload(parser, args.workload)
    if args.tenant not in workload.quotas:
        parser.error(f"--tenant: expected one of {sorted(workload.quotas)}, got {args.tenant!r}")
    seeds = parse_seeds(parser, args.seeds)
    guaranteed = workload.quotas[args.tenant].guaranteed.get(args.kind, 0.0)
    cases: list[tuple[str, str, Workload]] = [("partitioned", "partitioned", workload)]
    for text in (t.strip() for t in args.limits.split(",") if t.strip()):
        if text == NO_LIMIT:
            cases.append((f"tangram, lends {NO_LIMIT}", "tangram", workload))
            continue
        try:
            limit = float(text)
        except ValueError:
            limit = -1.0
        if not 0 <= limit <= guaranteed:
            parser.error(f"--limits: {text!r} is not {NO_LIMIT} or a number in [0, {guaranteed:g}]")
        limited = with_lending_limit(workload, args.tenant, args.kind, limit)
        cases.append((f"tangram, lends {limit:g}", "tangram", limited))
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as executor:
        futures = [
            [executor.submit(_run, w.with_seed(seed), policy, args.tenant) for seed in seeds]
            for _, policy, w in cases
        ]
        try:
            rows = [
                _row(label, [f.result() for f in runs])
                for (label, _, _), runs in zip(cases, futures, strict=True)
            ]
        except PolicyError as error:
            print(f"bench.lending: {error}", file=sys.stderr)
            return 1
    print(
        f"{workload.name}: {args.tenant} guarantees {guaranteed:g} {args.kind}"
        f" (seeds {args.seeds}; waits in seconds)\n"
        f"{'':<24}{'mean ACT':>9}{'step':>9}{'its wait':>10}{'p95':>8}{'others':>10}{'p95':>8}"
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
