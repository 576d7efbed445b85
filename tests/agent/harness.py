"""A small real websocket server playing the server's side, and an agent to run against it.

The server is scripted per test: it answers ``register`` and records every
message; a test drives it (assign, cancel, ack, drop the connection) and reads
what the agent sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from tangram_agent.agent import Agent
from tangram_agent.config import AgentConfig
from tangram_agent.executors import Executor, SleepExecutor

TOKEN = "agent-token"


class FakeServer:
    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.connection: ServerConnection | None = None
        self.connections = 0
        self.authorization: list[str | None] = []
        self.reject_next = False
        #: How each connection ended: the code the agent closed it with.
        self.close_codes: list[int | None] = []

    async def handler(self, ws: ServerConnection) -> None:
        try:
            await self._serve(ws)
        finally:
            self.close_codes.append(ws.close_code)

    async def _serve(self, ws: ServerConnection) -> None:
        self.authorization.append(ws.request.headers.get("Authorization") if ws.request else None)
        async for raw in ws:
            message = json.loads(raw)
            await self.inbox.put(message)
            if message["type"] == "register":
                if self.reject_next:
                    self.reject_next = False
                    await ws.send(json.dumps({"type": "error", "message": "bad token"}))
                    await ws.close()
                    return
                self.connections += 1
                self.connection = ws
                await ws.send(
                    json.dumps(
                        {
                            "type": "registered",
                            "node_id": "node-1",
                            "heartbeat_interval_s": 0.2,
                            "lease_s": 5,
                        }
                    )
                )

    async def send(self, message: dict[str, Any]) -> None:
        assert self.connection is not None
        await self.connection.send(json.dumps(message))

    async def next(self, kind: str, timeout: float = 20) -> dict[str, Any]:
        """The next message of ``kind``, skipping heartbeats and other kinds."""

        async def find() -> dict[str, Any]:
            while True:
                message = await self.inbox.get()
                if message["type"] == kind:
                    return message

        return await asyncio.wait_for(find(), timeout)

    async def ack(self, result: dict[str, Any]) -> None:
        await self.send({"type": "ack", "action": result["action"], "attempt": result["attempt"]})

    async def drop(self) -> None:
        assert self.connection is not None
        await self.connection.close()
        self.connection = None


def sleep_assignment(seconds: float, action_id: str = "a1", **extra: Any) -> dict[str, Any]:
    return {
        "id": action_id,
        "attempt": 1,
        "type": "sleep",
        "payload": {"seconds": seconds, **extra},
        "allocation": {"cpu": 1, "memory": 64},
        "units": 1,
        "timeout_s": 60,
    }


@asynccontextmanager
async def running_agent(
    executors: dict[str, Executor] | None = None, **config: Any
) -> AsyncIterator[tuple[FakeServer, Agent]]:
    server = FakeServer()
    async with serve(server.handler, "127.0.0.1", 0) as ws_server:
        port = ws_server.sockets[0].getsockname()[1]
        agent = Agent(
            AgentConfig(
                server=f"http://127.0.0.1:{port}",
                token=TOKEN,
                name="node-a",
                cpu=2,
                memory_mib=1024,
                reconnect_max_s=0.2,
                **config,
            ),
            executors=executors if executors is not None else {"sleep": SleepExecutor()},
        )
        task = asyncio.create_task(agent.run())
        try:
            yield server, agent
        finally:
            agent.stop()
            await asyncio.wait_for(task, 30)


def arun(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


async def until(check: Callable[[], bool], timeout: float = 10.0, what: str = "a check") -> None:
    """Wait for ``check`` to hold: a machine under load may take its time, never forever."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
