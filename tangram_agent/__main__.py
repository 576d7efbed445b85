"""``tangram-agent``: run the node agent until SIGTERM/SIGINT (a second one forces exit)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from tangram_agent.agent import Agent
from tangram_agent.config import (
    AgentConfig,
    default_cpu,
    default_memory_mib,
    gpus_argument,
    resolve_gpus,
    ro_bind_argument,
)
from tangram_agent.executors import DEFAULT_OUTPUT_CAP, KNOWN_EXECUTORS

log = logging.getLogger("tangram.agent")


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"labels are KEY=VALUE, got {text!r}")
    return key, value


def parse_args(argv: list[str] | None = None) -> AgentConfig:
    env = os.environ
    parser = argparse.ArgumentParser(prog="tangram-agent", description=__doc__)
    parser.add_argument("--server", default=env.get("TANGRAM_SERVER"), help="$TANGRAM_SERVER")
    parser.add_argument(
        "--token", default=env.get("TANGRAM_AGENT_TOKEN"), help="$TANGRAM_AGENT_TOKEN"
    )
    parser.add_argument(
        "--name",
        default=env.get("TANGRAM_NODE_NAME") or socket.gethostname(),
        help="$TANGRAM_NODE_NAME, else the host name",
    )
    parser.add_argument("--cpu", type=float, default=default_cpu(), help="cores to offer")
    parser.add_argument(
        "--memory", type=float, default=default_memory_mib(), help="MiB to offer (80%% of RAM)"
    )
    parser.add_argument(
        "--gpus",
        type=gpus_argument,
        default=env.get("TANGRAM_GPUS", "none"),
        help="$TANGRAM_GPUS: GPU ids (the N of /dev/nvidiaN) by interconnect group, e.g. "
        "0,1,2,3/4,5,6,7; 'none' (default); or 'auto': every GPU nvidia-smi lists, in one group",
    )
    parser.add_argument(
        "--gpu-memory-mib",
        type=float,
        default=None,
        help="MiB of memory per GPU, offered as gpu_memory (auto: nvidia-smi's, else none)",
    )
    parser.add_argument(
        "--executors",
        default=",".join(KNOWN_EXECUTORS),
        help=f"comma-separated, from {','.join(KNOWN_EXECUTORS)}",
    )
    parser.add_argument("--work-root", type=Path, default=None, help="sandbox work dirs")
    parser.add_argument("--output-cap", type=int, default=DEFAULT_OUTPUT_CAP, help="bytes")
    parser.add_argument("--max-concurrency", type=int, default=64)
    parser.add_argument("--cgroup-parent", default=None, help="a delegated cgroup v2 dir")
    parser.add_argument("--shutdown-grace", type=float, default=30.0, help="seconds")
    parser.add_argument(
        "--residents",
        type=int,
        default=None,
        help="idle reward.python scorers kept loaded (0: none; default 2, or one per GPU)",
    )
    parser.add_argument(
        "--resident-idle", type=float, default=300.0, help="seconds an idle scorer is kept"
    )
    parser.add_argument(
        "--sandbox-python",
        default=env.get("TANGRAM_SANDBOX_PYTHON"),
        help="$TANGRAM_SANDBOX_PYTHON: the Python that runs sandbox.python and reward.python "
        "(default /usr/bin/python3), e.g. a virtualenv's with a reward model's libraries",
    )
    parser.add_argument(
        "--sandbox-ro-bind",
        type=ro_bind_argument,
        action="append",
        default=[],
        metavar="HOST[:SANDBOX]",
        help="a host path every sandbox sees read-only (a Python environment, model weights); "
        "repeatable",
    )
    parser.add_argument("--label", type=_label, action="append", default=[], help="KEY=VALUE")
    parser.add_argument("--log-level", default=env.get("TANGRAM_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.server:
        parser.error("--server (or TANGRAM_SERVER) is required")
    gpu_groups, gpu_memory_mib = resolve_gpus(args.gpus, args.gpu_memory_mib)
    try:
        return AgentConfig(
            server=args.server,
            token=args.token or "",
            name=args.name,
            cpu=args.cpu,
            memory_mib=args.memory,
            executors=tuple(e.strip() for e in args.executors.split(",") if e.strip()),
            labels=dict(args.label),
            gpu_groups=gpu_groups,
            gpu_memory_mib=gpu_memory_mib,
            work_root=args.work_root,
            output_cap=args.output_cap,
            max_concurrency=args.max_concurrency,
            cgroup_parent=args.cgroup_parent,
            shutdown_grace_s=args.shutdown_grace,
            residents=args.residents,
            resident_idle_s=args.resident_idle,
            sandbox_python=args.sandbox_python,
            sandbox_ro_binds=tuple(args.sandbox_ro_bind),
        )
    except ValueError as exc:
        parser.error(str(exc))


async def _serve(agent: Agent) -> None:
    loop = asyncio.get_running_loop()
    stops = 0

    def on_signal() -> None:
        nonlocal stops
        stops += 1
        if stops == 1:
            log.info("signal received: draining (send again to exit now)")
            agent.stop()
        else:
            log.warning("second signal: exiting now")
            os._exit(1)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    await agent.run()


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    asyncio.run(_serve(Agent(config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
