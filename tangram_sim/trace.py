"""Action traces as JSONL: record a run, replay it through any action-level policy.

One JSON object per line, one line per finished action::

    {"id": "a17", "tenant": "team-a", "type": "math.python", "submitted": 12.5,
     "started": 12.5, "finished": 15.1, "node": "cpu-3", "units": 1, "base_s": 2.3}

``base_s`` is the run time at the action's minimum units (for a live run:
observed run time x the speedup of the units it ran on). A live scheduler can
write the same lines from its finished actions; replaying needs a workload
whose tasks declare the trace's types (``<task>.<type>``) and the pool.
A replay is open-loop: each action arrives at its recorded submit time,
whatever the policy does, so it compares ACT, not step times; ``static`` has
no trajectories to replay and is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO

from tangram_policy.types import Policy
from tangram_sim.sim import ActionRecord, Arrival, SimResult, Simulation
from tangram_sim.workload import Workload

FIELDS = ("id", "tenant", "type", "submitted", "started", "finished", "node", "units", "base_s")


def write_trace(records: Iterable[ActionRecord], out: IO[str]) -> int:
    count = 0
    for record in records:
        out.write(json.dumps(asdict(record), separators=(",", ":")) + "\n")
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
            )


def replay(records: Iterable[ActionRecord], workload: Workload, policy: str | Policy) -> SimResult:
    arrivals = [Arrival(r.submitted, r.type, r.tenant, r.base_s, r.id) for r in records]
    arrivals.sort(key=lambda a: (a.at, a.id))
    return Simulation(workload, policy, keep_records=True, arrivals=arrivals).run()


def main(argv: list[str] | None = None) -> int:
    """``record`` a simulated run to JSONL, or ``replay`` a trace through policies."""
    import argparse
    import sys

    from tangram_sim.sim import simulate
    from tangram_sim.workload import load_workload

    parser = argparse.ArgumentParser(prog="python -m tangram_sim.trace", description=__doc__)
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
    workload = load_workload(args.workload)
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
            f"  {summary['actions']} actions\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
