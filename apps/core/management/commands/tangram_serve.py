"""``make run``: the embedded mode in one process.

daphne serves HTTP and websockets; the scheduler runs as a task in daphne's
event loop and one local agent runs in a thread, connected over a real
websocket like any other agent.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.exceptions import ApplicationError
from apps.core.services import demo_seed
from tangram_agent.config import AgentConfig, gpus_argument, resolve_gpus, ro_bind_argument

if TYPE_CHECKING:
    from tangram_agent.agent import Agent


class Command(BaseCommand):
    help = "Run Tangram's embedded mode: web, scheduler and a local agent in one process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-agent", action="store_true", help="do not start a local agent")
        parser.add_argument("--agent-cpu", type=float, default=None, help="cores to offer")
        parser.add_argument("--agent-memory", type=float, default=None, help="MiB to offer")
        parser.add_argument(
            "--agent-residents",
            type=int,
            default=None,
            help="idle reward.python scorers the agent keeps loaded (0: none)",
        )
        parser.add_argument(
            "--agent-gpus",
            type=gpus_argument,
            default=os.environ.get("TANGRAM_GPUS", "none"),
            help="$TANGRAM_GPUS: the GPUs to offer, as tangram-agent's --gpus "
            "(0,1/2,3, 'auto' for every GPU nvidia-smi lists, or 'none')",
        )
        parser.add_argument(
            "--agent-sandbox-python",
            default=os.environ.get("TANGRAM_SANDBOX_PYTHON"),
            help="$TANGRAM_SANDBOX_PYTHON: as tangram-agent's --sandbox-python",
        )
        parser.add_argument(
            "--agent-sandbox-ro-bind",
            type=ro_bind_argument,
            action="append",
            default=[],
            metavar="HOST[:SANDBOX]",
            help="as tangram-agent's --sandbox-ro-bind; repeatable",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.TANGRAM_SCHEDULER != "inprocess":
            raise CommandError(
                "tangram_serve is the embedded mode; with REDIS_URL set, run daphne, "
                "a Celery worker and agents as separate processes (see README)."
            )
        settings.VAR_DIR.mkdir(exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        try:
            demo = demo_seed(
                tenant_token=settings.TANGRAM_DEMO_TOKEN,
                admin_password=os.environ.get("TANGRAM_ADMIN_PASSWORD", ""),
            )
        except ApplicationError as exc:  # only the fixed token can be refused
            raise CommandError(f"TANGRAM_DEMO_TOKEN: {exc.message}") from exc
        base = f"http://{options['host']}:{options['port']}"
        agent = None if options["no_agent"] else self._agent(options, base, demo.agent_token)
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"Tangram (embedded mode, policy {settings.TANGRAM_POLICY}) on {base}",
                    f"  dashboard:  {base}/   (log in as {demo.admin_username} / "
                    f"{demo.admin_password})",
                    f"  API docs:   {base}/api/v1/docs",
                    f"  demo token: {demo.tenant_token}",
                    "  try:",
                    f"    curl -s -X POST {base}/api/v1/actions "
                    f"-H 'Authorization: Bearer {demo.tenant_token}' "
                    "-H 'Content-Type: application/json' "
                    '-d \'{"type": "sandbox.python", "payload": {"code": "print(6*7)"}}\'',
                    "",
                ]
            )
        )
        self._serve(options, agent)

    def _serve(self, options: dict[str, Any], agent: Agent | None) -> None:
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server
        from twisted.internet import reactor

        from apps.scheduling.runner import runner
        from tangram_web.asgi import application

        def start_background() -> None:
            asyncio.ensure_future(runner.run())
            if agent is not None:
                threading.Thread(
                    target=asyncio.run, args=(agent.run(),), name="local-agent", daemon=True
                ).start()

        reactor.callWhenRunning(start_background)  # type: ignore[attr-defined]
        server = Server(
            application=application,
            endpoints=build_endpoint_description_strings(
                host=options["host"], port=options["port"]
            ),
            signal_handlers=True,
        )
        try:
            server.run()
        finally:
            if agent is not None:
                agent.stop()

    @staticmethod
    def _agent(options: dict[str, Any], base: str, token: str) -> Agent:
        from tangram_agent.agent import Agent

        sizes = {
            k: v
            for k, v in (
                ("cpu", options["agent_cpu"]),
                ("memory_mib", options["agent_memory"]),
                ("residents", options["agent_residents"]),
            )
            if v is not None
        }
        gpu_groups, gpu_memory_mib = resolve_gpus(options["agent_gpus"], None)
        try:
            config = AgentConfig(
                server=base,
                token=token,
                name="local",
                gpu_groups=gpu_groups,
                gpu_memory_mib=gpu_memory_mib,
                sandbox_python=options["agent_sandbox_python"],
                sandbox_ro_binds=tuple(options["agent_sandbox_ro_bind"]),
                **sizes,
            )
        except ValueError as exc:
            raise CommandError(f"the local agent: {exc}") from exc
        return Agent(config)
