"""The live scheduling round on PostgreSQL at scale: read, policy, writes.

    python -m bench.live_round                  # 10,000 queued x 1,000 nodes
    python -m bench.live_round --pending 10000 --nodes 1000 --running 5000

``bench.round`` times the policy alone; this times what the scheduler does
around it, on a scratch database (``TANGRAM_TEST_DB``, default
``bench_tangram_live``, created and dropped here): the snapshot read, the
policy, the conditional writes of every placement and their events. Three
rounds, each repeated inside a transaction that is rolled back:

- ``burst``: ``--pending`` queued on a pool with room for all of them;
- ``backlog``: the same queue on a pool that running actions fill;
- ``idle``: nothing queued (the periodic tick).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any

IMAGES = [f"image:py{i}" for i in range(6)]


def _fill(pending: int, nodes: int, running: int, seed: int = 1) -> None:
    from django.utils import timezone

    from apps.actions.models import Action
    from apps.inventory.models import Node
    from apps.tenants.models import Quota, Tenant

    rng = random.Random(seed)
    now = timezone.now()
    tenants = [Tenant.objects.create(name=f"team-{c}") for c in "abc"]
    for tenant in tenants:
        Quota.objects.create(tenant=tenant, resource="cpu", guaranteed=9000, limit=20000)
    pool = Node.objects.bulk_create(
        Node(
            name=f"n{i:05d}",
            capacity={"cpu": 32, "memory": 131072},
            executors=["sandbox.python", "sandbox.bash"],
            warm=rng.sample(IMAGES, 2),
            last_seen_at=now,
        )
        for i in range(nodes)
    )
    Action.objects.bulk_create(
        (
            Action(
                tenant=tenants[i % 3],
                type="sandbox.python",
                demand={"cpu": 4, "memory": 8192},
                timeout_s=600,
                state="running",
                node=pool[i % nodes],
                allocation={"cpu": 4, "memory": 8192},
                assigned_at=now,
                started_at=now,
            )
            for i in range(running)
        ),
        batch_size=2000,
    )
    kinds: list[tuple[str, dict[str, float], dict[str, Any]]] = [
        ("sandbox.python", {"cpu": 1, "memory": 2048}, {"min_units": 1, "max_units": 2}),
        ("sandbox.bash", {"cpu": 2, "memory": 4096}, {"min_units": 1, "max_units": 8}),
    ]
    Action.objects.bulk_create(
        (
            Action(
                tenant=tenants[rng.randrange(3)],
                type=kind,
                demand=demand,
                elasticity={**elastic, "parallel_fraction": 0.9, "unit_kind": "cpu"},
                affinity=[rng.choice(IMAGES)],
                timeout_s=600,
                payload={"code": "print(1)"},
            )
            for kind, demand, elastic in (kinds[rng.random() < 0.3] for _ in range(pending))
        ),
        batch_size=2000,
    )


def _time_round(repeat: int) -> dict[str, float]:
    from django.db import transaction

    from apps.scheduling.selectors import scheduling_snapshot
    from apps.scheduling.services import schedule_round

    rows: list[dict[str, float]] = []
    for _ in range(repeat):
        with transaction.atomic():
            started = time.perf_counter()
            snapshot = scheduling_snapshot()
            read_ms = (time.perf_counter() - started) * 1000
            transaction.set_rollback(True)
        with transaction.atomic():
            report = schedule_round()
            transaction.set_rollback(True)
        rows.append(
            {
                "queued": len(snapshot.pending),
                "nodes": len(snapshot.nodes),
                "placed": report.placed,
                "read_ms": read_ms,
                "policy_ms": report.policy_ms,
                "total_ms": report.total_ms,
            }
        )
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.live_round",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--running", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tangram_web.test_settings")
    os.environ.setdefault("TANGRAM_TEST_DB", "bench_tangram_live")
    os.environ.setdefault("TANGRAM_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.db import connection, transaction

    from apps.actions.models import Action

    creation = connection.creation
    name = creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        _fill(args.pending, args.nodes, args.running)
        print(
            f"{args.pending} queued x {args.nodes} nodes, {args.running} running "
            f"(median of {args.repeat}; policy {os.environ.get('TANGRAM_POLICY', 'tangram')})"
        )
        header = ("round", "queued", "nodes", "placed", "read ms", "policy ms", "total ms")
        print(f"{header[0]:<10}" + "".join(f"{h:>11}" for h in header[1:]))
        results = {"burst": _time_round(args.repeat)}
        with transaction.atomic():
            # The running actions take every core: nothing queued can be placed.
            per_node = max(args.running // args.nodes, 1)
            Action.objects.filter(state="running").update(
                allocation={"cpu": 32 / per_node, "memory": 8192}
            )
            results["backlog"] = _time_round(args.repeat)
            Action.objects.filter(state="queued").delete()
            results["idle"] = _time_round(args.repeat)
            transaction.set_rollback(True)
        for label, row in results.items():
            print(
                f"{label:<10}{row['queued']:>11.0f}{row['nodes']:>11.0f}{row['placed']:>11.0f}"
                f"{row['read_ms']:>11.1f}{row['policy_ms']:>11.1f}{row['total_ms']:>11.1f}"
            )
    finally:
        creation.destroy_test_db(name, verbosity=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
