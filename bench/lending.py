"""What a lending limit trades: the lender's wait against the borrowers'.

    python -m bench.lending fixtures/workloads/reclaim.yaml --tenant team-code
    python -m bench.lending WORKLOAD --tenant T --kind cpu --limits 32,16,8,0 --seeds 1,2,3
    python -m bench.lending WORKLOAD --own-tenant gpu_judge --kind gpu --limits all,2,1,0
    python -m bench.lending WORKLOAD --own-tenant offline --guarantee 24 --own-limit 36 --limits all

Runs ``tangram`` on the workload once per lending limit given to ``--tenant``'s
guarantee of ``--kind`` (``all``: the workload as written, no limit),
``partitioned`` as the reference a limit of 0 should approach, and ``fifo``
on the same quotas, one shared queue that lends all. Prints, pooled
over the seeds, the mean ACT and step, and how long actions wait (start minus
submit) of that tenant and of every other one: mean and p95.

``--own-tenant TASK`` first gives one task a tenant of its own, as an operator
would give a bursty reward model its own queue beside long jobs of the same
team: the new tenant, named after the task, takes ``--guarantee`` of the old
tenant's guarantee of ``--kind`` (half of it, rounded down, by default) and the
old tenant's limit and weight; its other kinds are unmanaged. It is the lender.
``--own-limit N`` splits the old tenant's limit of ``--kind`` instead: the new
tenant's is N and the old one keeps the rest, so that the two hold no more
than the one did (a quota per kind of work at the same total).
Every policy replays the same trajectories, whichever tenant a task is in, and
``partitioned`` shares the pool by task, so its row does not change unless a
split limit is below the task's share.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from bench.policy import parse_seeds, parse_workload
from tangram_policy.types import TenantQuota
from tangram_sim.sim import PolicyError, Simulation, quantile
from tangram_sim.workload import Workload

NO_LIMIT = "all"


def with_lending_limit(workload: Workload, tenant: str, kind: str, limit: float) -> Workload:
    quotas = dict(workload.quotas)
    quota = quotas[tenant]
    quotas[tenant] = replace(quota, lending_limit={**quota.lending_limit, kind: limit})
    return replace(workload, quotas=quotas)


def with_own_tenant(
    workload: Workload, task_name: str, kind: str, guarantee: float, limit: float | None = None
) -> Workload:
    """``task_name`` in a tenant of its own (named after it) that takes ``guarantee``
    of its old tenant's guarantee of ``kind`` and that tenant's weight, and ``limit``
    of its limit of ``kind`` (None: a limit as large as the old tenant's, which
    keeps its own)."""
    task = next(t for t in workload.tasks if t.name == task_name)
    old = workload.quotas[task.tenant]
    old_limit = old.limit
    if limit is None:
        own_limit = {kind: old.limit[kind]} if kind in old.limit else {}
    else:
        own_limit = {kind: limit}
        old_limit = {**old.limit, kind: old.limit[kind] - limit}
    quotas = dict(workload.quotas)
    quotas[task.tenant] = replace(
        old,
        guaranteed={**old.guaranteed, kind: old.guaranteed.get(kind, 0.0) - guarantee},
        limit=old_limit,
    )
    quotas[task_name] = TenantQuota(task_name, {kind: guarantee}, own_limit, old.weight)
    tasks = tuple(replace(t, tenant=task_name) if t is task else t for t in workload.tasks)
    return replace(workload, quotas=quotas, tasks=tasks)


def _run(workload: Workload, policy: str, tenant: str, task: str | None) -> dict[str, list[float]]:
    """Acts, steps and waits; the lender's actions are ``tenant``'s, or ``task``'s where
    given (so that the workload as written, before the task's move, compares)."""
    result = Simulation(workload, policy, keep_records=True).run()
    waits: dict[str, list[float]] = {"lender": [], "others": []}
    prefix = f"{task}/" if task is not None else None
    for record in result.records:
        mine = record.trajectory.startswith(prefix) if prefix else record.tenant == tenant
        side = "lender" if mine else "others"
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
    parser.add_argument("--tenant", help="the lender (required without --own-tenant)")
    parser.add_argument("--own-tenant", metavar="TASK", help="give TASK a tenant of its own")
    parser.add_argument(
        "--guarantee", type=float, help="of --kind, for --own-tenant's tenant (default: half)"
    )
    parser.add_argument(
        "--own-limit",
        type=float,
        help="of --kind, for --own-tenant's tenant, taken from its old tenant's limit",
    )
    parser.add_argument("--kind", default="cpu")
    parser.add_argument("--limits", default=f"{NO_LIMIT},16,8,0", help=f"numbers or {NO_LIMIT}")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    workload = written = parse_workload(parser, args.workload)
    moved = ""
    if args.own_tenant is not None:
        workload, args.tenant, moved = _own_tenant(parser, workload, args)
    elif args.tenant is None:
        parser.error("--tenant: required without --own-tenant")
    elif args.own_limit is not None:
        parser.error("--own-limit: only with --own-tenant")
    if args.tenant not in workload.quotas:
        parser.error(f"--tenant: expected one of {sorted(workload.quotas)}, got {args.tenant!r}")
    seeds = parse_seeds(parser, args.seeds)
    guaranteed = workload.quotas[args.tenant].guaranteed.get(args.kind, 0.0)
    cases: list[tuple[str, str, Workload]] = [
        ("partitioned", "partitioned", workload),
        ("fifo", "fifo", workload),
    ]
    if args.own_tenant is not None:
        cases.append(("tangram, as written", "tangram", written))
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
            [
                executor.submit(_run, w.with_seed(seed), policy, args.tenant, args.own_tenant)
                for seed in seeds
            ]
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
        f"{workload.name}: {args.tenant} guarantees {guaranteed:g} {args.kind}{moved}"
        f" (seeds {args.seeds}; waits in seconds)\n"
        f"{'':<24}{'mean ACT':>9}{'step':>9}{'its wait':>10}{'p95':>8}{'others':>10}{'p95':>8}"
    )
    print("\n".join(rows))
    return 0


def _own_tenant(
    parser: argparse.ArgumentParser, workload: Workload, args: argparse.Namespace
) -> tuple[Workload, str, str]:
    """``--own-tenant``: the workload with the task in its tenant, that tenant, and
    what the header says of it."""
    names = [task.name for task in workload.tasks]
    if args.own_tenant not in names:
        parser.error(f"--own-tenant: expected one of {names}, got {args.own_tenant!r}")
    if args.own_tenant in workload.quotas:
        parser.error(f"--own-tenant: a tenant is already named {args.own_tenant!r}")
    if args.tenant is not None:
        parser.error("--tenant: the lender is --own-tenant's tenant; give one or the other")
    old = next(t.tenant for t in workload.tasks if t.name == args.own_tenant)
    quota = workload.quotas.get(old)
    held = quota.guaranteed.get(args.kind, 0.0) if quota is not None else 0.0
    if held <= 0:
        parser.error(f"--own-tenant: its tenant {old!r} is guaranteed no {args.kind}")
    guarantee = float(int(held / 2)) if args.guarantee is None else args.guarantee
    if args.guarantee is None and guarantee <= 0:
        parser.error(f"--guarantee: half of {old}'s {held:g} {args.kind} is none; give one")
    if not 0 < guarantee <= held:
        parser.error(f"--guarantee: expected a number in (0, {held:g}], got {guarantee:g}")
    moved = f", moved from {old}'s {held:g}"
    if args.own_limit is not None:
        assert quota is not None  # it guarantees the kind
        if args.kind not in quota.limit:
            parser.error(f"--own-limit: its tenant {old!r} has no limit of {args.kind}")
        whole = quota.limit[args.kind]
        # Each tenant's limit covers its guarantee.
        most = whole - (held - guarantee)
        own_limit = args.own_limit
        if not guarantee <= own_limit <= most:
            parser.error(
                f"--own-limit: expected a number in [{guarantee:g}, {most:g}], got {own_limit:g}"
            )
        moved += f"; limit {own_limit:g} of its {whole:g}"
    own = with_own_tenant(workload, args.own_tenant, args.kind, guarantee, args.own_limit)
    return own, args.own_tenant, moved


if __name__ == "__main__":
    sys.exit(main())
