"""Action traces as JSONL: record a run, replay it through any action-level policy.

One JSON object per line, one line per finished action::

    {"id": "a17", "tenant": "team-a", "type": "math.python", "submitted": 12.5,
     "started": 12.5, "finished": 15.1, "node": "cpu-3", "units": 1, "base_s": 2.3,
     "trajectory": "math/0/41"}

Times are seconds from the start of the run. ``base_s`` is the run time at the
action's minimum units (for a live run: observed run time x the Amdahl speedup
of the units it ran on). ``trajectory`` is optional. ``python -m
tangram_sim.trace record`` writes a simulated run; ``python manage.py
tangram_trace`` writes a live one from its finished actions. Replaying needs
a workload whose tasks declare the trace's types (``<task>.<type>``) and the
pool.

A line without a trajectory is replayed open loop: it arrives at its recorded
submit time, whatever the policy does. Lines with one are replayed closed loop,
so that a faster policy gets a trajectory's later actions sooner: an action
waits on the action of its trajectory that last finished (as recorded) before
it was submitted, and arrives at that action's replayed finish plus the
recorded gap between the two (the LLM's think time). An action with no such
predecessor (the trajectory's first, or one submitted while all earlier ones
still ran, as parallel tool calls are) arrives at its recorded submit time.
ACT and the makespan then compare policies; RL step times do not, as a trace
holds no step barriers.

``static`` is refused: it binds a sandbox to a trajectory from the trajectory's
start to its end, think time before the first action and after the last
included, and a trace records only the actions, so the sandbox's lifetime (the
very cost static pays) would be made up.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO

from tangram_policy.types import Policy
from tangram_sim.sim import ActionRecord, Arrival, SimResult, Simulation
from tangram_sim.workload import Workload


def write_trace(records: Iterable[ActionRecord], out: IO[str]) -> int:
    count = 0
    for record in records:
        line = asdict(record)
        if not line["trajectory"]:
            del line["trajectory"]
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
        count += 1
    return count


def read_trace(path: str | Path) -> Iterator[ActionRecord]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            raw = json.loads(line)
            missing = [f for f in ("tenant", "type", "submitted", "base_s") if f not in raw]
            if missing:
                raise ValueError(f"{path}:{number}: missing {', '.join(missing)}")
            yield ActionRecord(
                id=str(raw.get("id", f"t{number}")),
                tenant=str(raw["tenant"]),
                type=str(raw["type"]),
                submitted=float(raw["submitted"]),
                started=float(raw.get("started", -1.0)),
                finished=float(raw.get("finished", -1.0)),
                node=str(raw.get("node", "")),
                units=int(raw.get("units", 1)),
                base_s=float(raw["base_s"]),
                trajectory=str(raw.get("trajectory") or ""),
            )


def trace_arrivals(records: Iterable[ActionRecord]) -> list[Arrival]:
    """The arrivals of a replay, in recorded submit order, each trajectory's chained."""
    ordered = sorted(records, key=lambda r: (r.submitted, r.id))
    # Per (tenant, trajectory): a heap of earlier actions by recorded finish, and of
    # those finished by the current submit, the last to finish (finish, submit, id).
    unfinished: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    latest: dict[tuple[str, str], tuple[float, float, str]] = {}
    arrivals = []
    for r in ordered:
        if not r.trajectory:
            arrivals.append(Arrival(r.submitted, r.type, r.tenant, r.base_s, r.id))
            continue
        if r.finished < 0:
            raise ValueError(f"trace action {r.id!r}: a line with a trajectory needs 'finished'")
        key = (r.tenant, r.trajectory)
        earlier = unfinished.setdefault(key, [])
        while earlier and earlier[0][0] <= r.submitted:
            done = heapq.heappop(earlier)
            if key not in latest or done > latest[key]:
                latest[key] = done
        before = latest.get(key)
        arrivals.append(
            Arrival(
                r.submitted,
                r.type,
                r.tenant,
                r.base_s,
                r.id,
                r.trajectory,
                after=before[2] if before else "",
                think_s=r.submitted - before[0] if before else 0.0,
            )
        )
        heapq.heappush(earlier, (r.finished, r.submitted, r.id))
    return arrivals


def replay(records: Iterable[ActionRecord], workload: Workload, policy: str | Policy) -> SimResult:
    arrivals = trace_arrivals(records)
    return Simulation(workload, policy, keep_records=True, arrivals=arrivals).run()


def main(argv: list[str] | None = None) -> int:
    """``record`` a simulated run to JSONL, or ``replay`` a trace through policies."""
    import argparse
    import sys

    from tangram_sim.sim import simulate
    from tangram_sim.workload import WorkloadError, load_workload

    parser = argparse.ArgumentParser(
        prog="python -m tangram_sim.trace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("record", help="simulate and write every action as JSONL")
    record.add_argument("workload")
    record.add_argument("out")
    record.add_argument("--policy", default="tangram")
    record.add_argument("--seed", type=int, default=None)
    play = commands.add_parser("replay", help="replay a JSONL trace through policies")
    play.add_argument("workload")
    play.add_argument("trace")
    play.add_argument("--policies", default="partitioned,fifo,tangram")
    args = parser.parse_args(argv)
    try:
        workload = load_workload(args.workload)
    except WorkloadError as error:
        parser.error(str(error))
    if args.command == "record":
        if args.seed is not None:
            workload = workload.with_seed(args.seed)
        result = simulate(workload, args.policy, keep_records=True)
        with open(args.out, "w", encoding="utf-8") as out:
            count = write_trace(result.records, out)
        print(f"{count} actions written to {args.out}")
        return 0
    records = list(read_trace(args.trace))
    for name in args.policies.split(","):
        summary = replay(records, workload, name).summary()
        sys.stdout.write(
            f"{name:<24} mean ACT {summary['mean_act_s']:8.2f}s  p99 {summary['p99_act_s']:8.2f}s"
            f"  makespan {summary['makespan_s']:8.1f}s  {summary['actions']} actions\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
