"""One scheduling round at scale: 10,000 queued actions on 1,000 nodes.

    python -m bench.round                  # tangram, 10,000 x 1,000
    python -m bench.round --policies tangram,fifo --pending 10000 --nodes 1000
    python -m bench.round --grown 1000     # 1,000 of the running actions hold extra cores

The state is a busy cluster: 1,000 nodes (90% 32-core CPU nodes with two of
six sandbox images warm, 10% 8-GPU hosts in two NVLink groups with a reward
model resident on half), 5,000 actions running, 10,000 queued across three
tenants with quotas: short and long sandbox calls (elastic), multi-GPU
actions, batchable reward scoring and API calls. With ``--grown N``, N of the
running CPU actions are elastic ones grown to 4 units that the round may
shrink for the queue (``Snapshot.resizable``): the round then places twice.

Each policy decides on the state as the live scheduler and the simulator hand
it (``tangram_policy.pool.partial_view``: nodes with their free room as capacity, usage per tenant,
the pool's capacity) and, for comparison, with every running action listed
(``... (every running action)``; the same decisions). Prints the median and
worst of the timed rounds and how many placements each made, then how long
a bare interpreter loop takes on this machine, to read the milliseconds by.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

from tangram_policy.pool import partial_view
from tangram_policy.registry import get_policy
from tangram_policy.types import (
    DurationStat,
    Elasticity,
    Node,
    PendingAction,
    Resizable,
    RunningAction,
    Snapshot,
    TenantQuota,
)

IMAGES = [f"image:py{i}" for i in range(6)]
TENANTS = ("team-a", "team-b", "team-c")


def build_snapshot(
    pending: int, nodes: int, running: int, seed: int = 1, grown: int = 0
) -> Snapshot:
    rng = random.Random(seed)
    node_list: list[Node] = []
    for i in range(nodes):
        if i % 10 == 9:
            gpus = tuple(f"n{i}:g{j}" for j in range(8))
            node_list.append(
                Node(
                    f"n{i}",
                    {"cpu": 64, "memory": 524288, "gpu": 8, "gpu_memory": 655360},
                    frozenset({"reward", "train_step"}),
                    frozenset({"model:rm"}) if i % 20 == 19 else frozenset(),
                    (gpus[:4], gpus[4:]),
                )
            )
        else:
            node_list.append(
                Node(
                    f"n{i}",
                    {"cpu": 32, "memory": 131072},
                    frozenset({"python", "tests", "api"}),
                    frozenset(rng.sample(IMAGES, 2)),
                )
            )
    node_list.append(Node("api", {"api:judge": 256}, frozenset({"judge"})))
    running_list: list[RunningAction] = []
    resizable: list[Resizable] = []
    for i in range(running):
        node = node_list[rng.randrange(nodes)]
        if "gpu" in node.capacity:
            allocation = {"gpu": 1.0, "cpu": 4.0, "memory": 32768.0}
        else:
            allocation = {"cpu": 4.0, "memory": 8192.0}
        running_list.append(
            RunningAction(f"r{i}", TENANTS[i % 3], "python", node.id, allocation, 0.0)
        )
        if len(resizable) < grown and "gpu" not in allocation:  # 4 units of 1 core, min 1
            resizable.append(
                Resizable(f"r{i}", TENANTS[i % 3], node.id, allocation, 4, Elasticity(1, 4, 0.9))
            )
    kinds = [
        ("python", {"cpu": 1.0, "memory": 2048.0}, Elasticity(1, 2, 0.3), None, 2.0),
        ("tests", {"cpu": 2.0, "memory": 4096.0}, Elasticity(1, 8, 0.9), None, 40.0),
        ("train_step", {"gpu": 4.0, "cpu": 16.0, "memory": 65536.0}, Elasticity(), None, 300.0),
        ("reward", {"gpu": 1.0, "cpu": 4.0, "memory": 32768.0}, Elasticity(), "rm", 6.0),
        ("judge", {"api:judge": 1.0}, Elasticity(), None, 3.0),
    ]
    pending_list: list[PendingAction] = []
    for i in range(pending):
        kind, demand, elasticity, batch, _ = kinds[rng.choices(range(5), (50, 20, 2, 18, 10))[0]]
        pending_list.append(
            PendingAction(
                id=f"p{i}",
                tenant=TENANTS[rng.randrange(3)],
                type=kind,
                demand=demand,
                submitted_at=1000.0 + rng.random() * 60.0,
                priority=rng.choice((0, 0, 0, 1)),
                elasticity=elasticity,
                affinity=frozenset({rng.choice(IMAGES)})
                if kind in ("python", "tests")
                else frozenset({"model:rm"})
                if kind == "reward"
                else frozenset(),
                batch_key=batch,
                batch_limit=16 if batch else 1,
                setup_s=30.0 if kind != "judge" else 0.0,
            )
        )
    quotas = {
        t: TenantQuota(
            t,
            guaranteed={"cpu": 9000.0, "gpu": 200.0, "api:judge": 80.0},
            limit={"cpu": 20000.0, "gpu": 600.0, "api:judge": 200.0},
            weight=w,
        )
        for t, w in zip(TENANTS, (1.0, 2.0, 1.0), strict=True)
    }
    stats = {(t, kind): DurationStat(50, mean) for t in TENANTS for kind, _, _, _, mean in kinds}
    return Snapshot(
        now=1060.0,
        nodes=tuple(node_list),
        quotas=quotas,
        pending=tuple(pending_list),
        running=tuple(running_list),
        duration_stats=stats,
        resizable=tuple(resizable),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.round",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--policies", default="tangram")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--running", type=int, default=5_000)
    parser.add_argument(
        "--grown", type=int, default=0, help="running actions holding 3 cores they may give back"
    )
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per round of the first policy on the partial view under "
        "valgrind (slow; unlike wall time, the count does not drift with the machine)",
    )
    parser.add_argument("--rounds-only", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    full = build_snapshot(args.pending, args.nodes, args.running, grown=args.grown)
    if args.rounds_only:  # the workload --instructions counts: build, then N rounds, silently
        policy = get_policy(args.policies.split(",")[0])
        snapshot = partial_view(full)
        for _ in range(args.rounds_only):
            policy.decide(snapshot)
        return 0
    if args.instructions:
        return _count_instructions(args.policies.split(",")[0], argv or sys.argv[1:])
    views = {"": partial_view(full), " (every running action)": full}
    print(f"{args.pending} pending x {args.nodes} nodes, {args.running} running")
    print(f"{'policy':<40}{'median ms':>10}{'max ms':>10}{'placements':>12}{'resizes':>9}")
    for name in args.policies.split(","):
        policy = get_policy(name)
        repeat = args.repeat if name != "fifo" else 1
        for view, snapshot in views.items():
            timings = []
            placements = resizes = 0
            for _ in range(repeat):
                started = time.perf_counter()
                decision = policy.decide(snapshot)
                timings.append((time.perf_counter() - started) * 1000.0)
                placements, resizes = len(decision.placements), len(decision.resizes)
            label = name + view
            print(
                f"{label:<40}{statistics.median(timings):>10.1f}{max(timings):>10.1f}"
                f"{placements:>12}{resizes:>9}"
            )
    print(
        f"this machine: 10^7 Python additions in {_bare_loop_s():.2f} s (the same run's yardstick)"
    )
    print(f"interpreter: {_interpreter()}")
    return 0


def _interpreter() -> str:
    """Which Python ran the round, and whether it runs from a shared libpython:
    such a build (pyenv's) takes 11-15% longer on the round than one with the
    interpreter in its executable (Debian's /usr/bin/python3.11, which the
    Makefile builds ``.venv`` on; bench/README.md, "The interpreter")."""
    try:
        with open("/proc/self/maps") as maps:
            shared = "libpython" in maps.read()
    except OSError:
        linked = "linking unknown"
    else:
        linked = "a shared libpython" if shared else "the interpreter in its executable"
    executable = os.path.realpath(sys.executable)  # a venv's python links to it
    return f"Python {platform.python_version()} at {executable}, {linked}"


def _bare_loop_s() -> float:
    """Seconds a bare interpreter loop takes: this VM's speed drifts by 2x from day
    to day, and milliseconds per round mean little without it. At module level, as
    ``python -c`` runs it (bench/README.md quotes that figure since stop 27)."""
    started = time.perf_counter()
    exec("s = 0\nfor i in range(10 ** 7): s += i", {})
    return time.perf_counter() - started


def _count_instructions(policy: str, argv: list[str]) -> int:
    """Instructions per round: (a run of 3 rounds - a run of 1) / 2, so that
    interpreter start-up and building the snapshot cancel out."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("--instructions needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    passed = [a for a in argv if a != "--instructions"]
    counts = []
    for rounds in (1, 3):
        ran = subprocess.run(
            [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
            + ["-m", "bench.round", *passed, "--rounds-only", str(rounds)],
            capture_output=True,
            text=True,
            check=True,
        )
        collected = re.search(r"Collected : (\d+)", ran.stderr)
        assert collected is not None, ran.stderr[-2000:]
        counts.append(int(collected.group(1)))
    per_round = (counts[1] - counts[0]) / 2
    print(f"{policy}: {per_round / 1e6:.0f} M instructions per round (partial view)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
