"""A real Tangram cluster in processes: daphne, a Celery worker with beat, agents.

Each cluster gets its own Postgres database and Redis database, so it can run
beside the rest of the suite. Used by the end-to-end tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

from tests.cgroups import cores_allowed

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_cores(parents: list[Path], action_id: str) -> float | None:
    """The cores a run cgroup of ``action_id`` under ``parents`` may use (inf:
    unlimited); None while there is none."""
    for parent in parents:
        for run in parent.glob(f"{action_id}-*"):
            with contextlib.suppress(OSError, ValueError):  # not the cpu one, or it ended
                cores = cores_allowed(run)
                return float("inf") if cores is None else cores
    return None


@contextmanager
def sampled_cpu_quota(agent_pid: int, action_id: str) -> Iterator[list[tuple[float, float]]]:
    """Read, ten times a second, the CPU quota an agent's cgroup gives a run of
    ``action_id``: ``(time.time(), cores)`` pairs. What the agent asked of the
    kernel, which a loaded machine cannot blur as it blurs the CPU a run gets."""
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        parents: list[Path] = []
        while not stop.wait(0.1):
            parents = parents or list(Path("/sys/fs/cgroup").glob(f"**/tangram-agent-{agent_pid}"))
            cores = _run_cores(parents, action_id)
            if cores is not None:
                samples.append((time.time(), cores))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class Cluster:
    base_url: str
    database_url: str
    env: dict[str, str]
    log_dir: Path
    redis_port: int = 0
    agent_token: str = ""
    tenant_token: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def manage(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def spawn(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = proc
        return proc

    def start_agent(self, name: str, *extra: str, cpu: float = 2, memory: float = 4096) -> None:
        self.spawn(
            name,
            sys.executable,
            "-m",
            "tangram_agent",
            "--server",
            self.base_url,
            "--token",
            self.agent_token,
            "--name",
            name,
            "--cpu",
            str(cpu),
            "--memory",
            str(memory),
            "--shutdown-grace",
            "2",
            *extra,
        )

    def start_redis(self) -> None:
        """A Redis of the cluster's own, so a test can take it away and bring it back."""
        self.spawn(
            "redis",
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.redis_port),
            "--save",
            "",
            "--appendonly",
            "no",
        )
        client = redis.Redis(port=self.redis_port)

        def up() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_for(up, 10, "redis")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.processes.pop(name)
        os.kill(proc.pid, sig)
        proc.wait(timeout=10)

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def online_nodes(self) -> set[str]:
        return {r[0] for r in self.sql("SELECT name FROM inventory_node WHERE state = 'online'")}

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )


@contextmanager
def running_cluster(tmp_path: Path, agents: list[str]) -> Iterator[Cluster]:
    name = f"tangram_e2e_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    port, redis_port = free_port(), free_port()
    database_url = f"postgres://postgres@127.0.0.1:5432/{name}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tangram_web.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "TANGRAM_SCHEDULER": "celery",
        "TANGRAM_LEASE_S": "3",
        "TANGRAM_HEARTBEAT_S": "1",
        "TANGRAM_TICK_S": "1",
        "PYTHONUNBUFFERED": "1",
    }
    cluster = Cluster(f"http://127.0.0.1:{port}", database_url, env, tmp_path, redis_port)
    try:
        cluster.start_redis()
        cluster.manage("migrate", "--no-input")
        cluster.tenant_token = cluster.manage("tangram_token", "e2e")
        cluster.agent_token = cluster.manage("tangram_agent_token")
        bin_dir = Path(sys.executable).parent
        cluster.spawn(
            "daphne",
            str(bin_dir / "daphne"),
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "tangram_web.asgi:application",
        )
        cluster.spawn(
            "celery",
            str(bin_dir / "celery"),
            "-A",
            "tangram_web",
            "worker",
            "-B",
            "-Q",
            "scheduler",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "-s",
            str(tmp_path / "beat-schedule"),
        )

        def web_up() -> bool:
            try:
                return httpx.get(f"{cluster.base_url}/api/v1/schema", timeout=1).status_code > 0
            except httpx.HTTPError:
                return False

        wait_for(web_up, 30, "daphne")
        for agent in agents:
            cluster.start_agent(agent)
        wait_for(lambda: cluster.online_nodes() >= set(agents), 30, "agents to register")
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        for proc in cluster.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in cluster.processes.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
