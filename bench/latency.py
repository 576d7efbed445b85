"""Submit-to-result latency of trivial actions, end to end through the client.

    python -m bench.latency                 # starts the embedded mode on a free port
    python -m bench.latency --url URL --token TOKEN   # any running deployment

Prints, per action type, the client-observed latency of ``run()`` (submit, then
long-poll until terminal) and the server's ACT, sequentially (the latency one
trainer sees) and as a burst (all submitted at once, then awaited together).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tangram_client import AsyncClient, Client, TangramError

ROOT = Path(__file__).resolve().parents[1]
ACTIONS = {
    "sleep": {"seconds": 0},
    "sandbox.python": {"code": "print(1)"},
}


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


@contextmanager
def embedded_server(*serve_args: str) -> Iterator[tuple[str, str]]:
    """The embedded mode on a free port (``serve_args`` go to ``tangram_serve``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "tgm_bench_" + os.urandom(12).hex()
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
            "TANGRAM_DEMO_TOKEN": token,
            "TANGRAM_LOG_LEVEL": "WARNING",
        }
        env.pop("REDIS_URL", None)
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "tangram_serve", "--port", str(port), *serve_args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    with Client(url, token) as client:
                        client.run("sleep", {"seconds": 0}, timeout_s=5)
                    break
                except (TangramError, TimeoutError):
                    time.sleep(0.2)
            yield url, token
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@contextmanager
def target(url: str | None, token: str | None, *serve_args: str) -> Iterator[tuple[str, str]]:
    """The deployment at ``url`` (with ``token``), or else the embedded mode, started here
    with ``serve_args``."""
    if url:
        yield url, token or ""
    else:
        with embedded_server(*serve_args) as server:
            yield server


def sequential(url: str, token: str, kind: str, n: int) -> tuple[list[float], list[float]]:
    latencies, acts = [], []
    with Client(url, token) as client:
        for _ in range(n):
            started = time.perf_counter()
            action = client.run(kind, ACTIONS[kind], timeout_s=30)
            latencies.append(time.perf_counter() - started)
            assert action.ok, (action.state, action.error, action.stderr)
            acts.append(action.act_s or 0.0)
    return latencies, acts


def burst(url: str, token: str, kind: str, n: int) -> tuple[float, list[float]]:
    async def main() -> tuple[float, list[float]]:
        async with AsyncClient(url, token) as client:
            started = time.perf_counter()
            submitted = await client.submit_many([{"type": kind, "payload": ACTIONS[kind]}] * n)
            done = await client.wait_all([a.id for a in submitted], timeout=300)
            wall = time.perf_counter() - started
        assert all(a.ok for a in done)
        return wall, [a.act_s or 0.0 for a in done]

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("-n", type=int, default=50, help="sequential runs per type")
    parser.add_argument("--burst", type=int, default=200, help="actions per burst")
    args = parser.parse_args()

    with target(args.url, args.token) as (url, token):
        print(f"target {url}; {args.n} sequential runs and a burst of {args.burst} per type\n")
        print(
            f"{'type':<16}{'p50 run() ms':>14}{'p95 ms':>10}{'p50 ACT ms':>12}"
            f"{'burst wall s':>14}{'actions/s':>11}{'burst mean ACT s':>18}"
        )
        for kind in ACTIONS:
            latencies, acts = sequential(url, token, kind, args.n)
            wall, burst_acts = burst(url, token, kind, args.burst)
            print(
                f"{kind:<16}{_pct(latencies, 50) * 1000:>14.1f}{_pct(latencies, 95) * 1000:>10.1f}"
                f"{statistics.median(acts) * 1000:>12.1f}{wall:>14.2f}{args.burst / wall:>11.1f}"
                f"{statistics.mean(burst_acts):>18.2f}"
            )


if __name__ == "__main__":
    main()
