"""The node agent: holds a websocket to the server and runs what it is assigned.

Runs outlive connections. A disconnect only pauses reporting: the agent
reconnects with backoff, registers again listing what it still runs, and
re-sends every result the server has not acknowledged, so a flaky network
loses no work and reports nothing twice that the server would count twice
(the server keeps the first result per attempt and acks every copy).

Embeddable: ``await Agent(config).run()`` in any event loop, and ``stop()``
from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from tangram_agent.batches import Gathering
from tangram_agent.config import AgentConfig
from tangram_agent.executors import (
    BatchExecutor,
    Executor,
    Outcome,
    ResizableExecutor,
    Sandbox,
    WarmExecutor,
    build_executors,
)
from tangram_agent.protocol import (
    PROTOCOL_VERSION,
    ActionRef,
    Assignment,
    Heartbeat,
    Register,
    Resize,
    Result,
    Started,
    whole_batch,
)

log = logging.getLogger("tangram.agent")

RunKey = tuple[str, int]
#: How long to wait for ``registered`` after sending ``register``.
REGISTER_TIMEOUT_S = 30.0
#: How long a stopping agent waits for the last results to be acknowledged.
FLUSH_TIMEOUT_S = 5.0


class AgentRejected(Exception):
    """The server refused this agent (bad token, protocol mismatch ...)."""


@dataclass
class _Run:
    task: asyncio.Task[None]
    #: What the run runs with: a resize changes its allocation in place, so a run
    #: not launched yet starts with the new one.
    assignment: Assignment


class Agent:
    def __init__(
        self, config: AgentConfig, *, executors: Mapping[str, Executor] | None = None
    ) -> None:
        self.config = config
        self._executors: dict[str, Executor] = dict(executors) if executors is not None else {}
        self._build_executors = executors is None
        self._sandbox: Sandbox | None = None
        self._runs: dict[RunKey, _Run] = {}
        #: Runs killed by a forced shutdown: they get no result, the lease re-queues them.
        self._abandoned: set[RunKey] = set()
        self._unacked: dict[RunKey, Result] = {}
        self._ws: ClientConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = threading.Event()
        self._stop_event: asyncio.Event | None = None
        self._flushed: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None
        #: Per batch id, the lock its members take turns on and how many hold or await it.
        self._batches: dict[str, tuple[asyncio.Lock, int]] = {}
        #: Per batch id, the open gathering of a batch executor's members.
        self._gatherings: dict[str, Gathering] = {}
        self.node_id: str | None = None
        #: Set while registered with the server (for embedding and tests).
        self.registered = threading.Event()

    # -- public --------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking work, finish (or after the grace period kill) runs, exit.

        Safe to call from any thread, and before ``run()`` started.
        """
        self._stop_requested.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_stop)

    @property
    def running(self) -> list[ActionRef]:
        refs: list[ActionRef] = []
        for (action, attempt), run in self._runs.items():
            ref: ActionRef = {"action": action, "attempt": attempt}
            cpu = run.assignment["allocation"].get("cpu")
            if cpu is not None:
                ref["cpu"] = float(cpu)
            gpus = run.assignment.get("gpus")
            if gpus:
                ref["gpus"] = [str(gpu) for gpu in gpus]
            refs.append(ref)
        return refs

    @property
    def warm(self) -> list[str]:
        """Warm-state keys this node holds now (resident scorers)."""
        keys: set[str] = set()
        for executor in self._executors.values():
            if isinstance(executor, WarmExecutor):
                keys.update(executor.warm_keys())
        return sorted(keys)

    @property
    def warm_slots(self) -> int:
        """Warm-state keys this node keeps at most (idle resident scorers)."""
        executors = {id(e): e for e in self._executors.values() if isinstance(e, WarmExecutor)}
        return sum(executor.warm_slots() for executor in executors.values())

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._flushed = asyncio.Event()
        self._slots = asyncio.Semaphore(self.config.max_concurrency)
        if self._stop_requested.is_set():
            self._stop_event.set()
        if self._build_executors:
            self._executors, self._sandbox = await asyncio.to_thread(
                build_executors, self.config.executors, self.config.sandbox_settings()
            )
        for executor in self._executors.values():
            if isinstance(executor, WarmExecutor):
                executor.watch_warm(self._warm_changed)
        log.info(
            "agent %s starting: server=%s capacity=%s gpu_groups=%s executors=%s",
            self.config.name,
            self.config.ws_url,
            self.config.capacity,
            self.config.gpu_groups,
            sorted(self._executors),
        )
        connection = asyncio.create_task(self._connection_loop(), name="tangram-agent-connection")
        try:
            await self._stop_event.wait()
            await self._drain()
        finally:
            await self._say_goodbye()
            connection.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connection
            for run in self._runs.values():
                run.task.cancel()
            for executor in self._executors.values():
                if isinstance(executor, WarmExecutor):
                    await executor.cool()
            if self._sandbox is not None:
                self._sandbox.close()
            self.registered.clear()
            log.info("agent %s stopped", self.config.name)

    # -- lifecycle -----------------------------------------------------------

    def _wake_stop(self) -> None:
        if self._stop_event is not None:
            self._stop_event.set()

    async def _say_goodbye(self) -> None:
        """Close the connection as going away (1001): cancelling the connection would
        close it as an internal error (1011), and a clean stop is not one."""
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(1001, "agent stopping"), FLUSH_TIMEOUT_S)

    async def _drain(self) -> None:
        runs = [run.task for run in self._runs.values()]
        if runs:
            log.info(
                "stopping: waiting up to %gs for %d running action(s)",
                self.config.shutdown_grace_s,
                len(runs),
            )
            _, pending = await asyncio.wait(runs, timeout=self.config.shutdown_grace_s)
            if pending:
                log.warning(
                    "stopping: killing %d action(s) still running; the server re-queues them",
                    len(pending),
                )
                for key, run in list(self._runs.items()):
                    self._abandoned.add(key)
                    run.task.cancel()
                await asyncio.wait(pending, timeout=10)
        if self._unacked:
            assert self._flushed is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._flushed.wait(), FLUSH_TIMEOUT_S)
            if self._unacked:
                log.warning("stopping with %d unacknowledged result(s)", len(self._unacked))

    @property
    def _stopping(self) -> bool:
        return self._stop_event is not None and self._stop_event.is_set()

    # -- connection ----------------------------------------------------------

    async def _connection_loop(self) -> None:
        failures = 0
        while True:
            try:
                async with connect(
                    self.config.ws_url,
                    additional_headers={"Authorization": f"Bearer {self.config.token}"},
                    open_timeout=10,
                    max_size=None,
                ) as ws:
                    await self._session(ws)
                    failures = 0
                    if not self._stopping:
                        log.warning("connection to %s closed", self.config.ws_url)
            except AgentRejected as exc:
                log.error("server rejected agent %s: %s", self.config.name, exc)
            except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake, InvalidURI) as exc:
                log.warning("connection to %s failed: %r", self.config.ws_url, exc)
            except Exception:
                # Whatever the server sent, the agent must keep its runs and retry.
                log.exception("connection to %s broke", self.config.ws_url)
            finally:
                self._ws = None
                self.registered.clear()
            failures += 1
            delay = min(self.config.reconnect_max_s, 0.25 * 2 ** min(failures, 10))
            delay *= random.uniform(0.5, 1.0)
            log.info("reconnecting in %.2fs", delay)
            await asyncio.sleep(delay)

    async def _session(self, ws: ClientConnection) -> None:
        register: Register = {
            "type": "register",
            "protocol": PROTOCOL_VERSION,
            "node": self.config.name,
            "capacity": self.config.capacity,
            "executors": sorted(self._executors),
            "warm": self.warm,
            "labels": dict(self.config.labels),
            "running": self.running,
            "gpu_groups": [list(group) for group in self.config.gpu_groups],
            "sent_at": time.time(),
            "warm_slots": self.warm_slots,
        }
        await ws.send(json.dumps(register))
        reply = json.loads(await asyncio.wait_for(ws.recv(), REGISTER_TIMEOUT_S))
        if reply.get("type") == "error":
            raise AgentRejected(reply.get("message", ""))
        if reply.get("type") != "registered":
            raise AgentRejected(f"expected 'registered', got {reply.get('type')!r}")
        self.node_id = str(reply["node_id"])
        interval = float(reply.get("heartbeat_interval_s") or 5.0)
        log.info(
            "registered as node %s (heartbeat %gs, %d running, %d result(s) to re-send)",
            self.node_id,
            interval,
            len(self._runs),
            len(self._unacked),
        )
        self._ws = ws
        self.registered.set()
        for result in list(self._unacked.values()):
            await ws.send(json.dumps(result))
        heartbeat = asyncio.create_task(self._heartbeat(ws, interval))
        try:
            async for raw in ws:
                try:
                    self._handle(json.loads(raw))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("ignoring malformed message %.200r: %r", raw, exc)
        finally:
            heartbeat.cancel()

    async def _heartbeat(self, ws: ClientConnection, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(ConnectionClosed):
                await ws.send(json.dumps(self._heartbeat_message()))

    def _heartbeat_message(self) -> Heartbeat:
        return {
            "type": "heartbeat",
            "running": self.running,
            "sent_at": time.time(),
            "warm": self.warm,
        }

    def _warm_changed(self) -> None:
        """Tell the server at once, so the next round places by what is warm now."""
        if self._ws is not None:
            self._send_soon(self._heartbeat_message())

    async def _send(self, message: Mapping[str, Any]) -> bool:
        ws = self._ws
        if ws is None:
            return False
        try:
            await ws.send(json.dumps(message))
        except ConnectionClosed:
            return False
        return True

    # -- messages --------------------------------------------------------------

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "assign":
            self._on_assign(cast(Assignment, message["action"]))
        elif kind == "cancel":
            self._on_cancel((str(message["action"]), int(message["attempt"])))
        elif kind == "ack":
            self._unacked.pop((str(message["action"]), int(message["attempt"])), None)
            if not self._unacked and self._flushed is not None:
                self._flushed.set()
        elif kind == "resize":
            self._on_resize(cast(Resize, message))
        elif kind == "error":
            log.error("server error: %s", message.get("message"))
        else:
            log.warning("ignoring unknown message type %r", kind)

    def _on_assign(self, assignment: Assignment) -> None:
        key = (str(assignment["id"]), int(assignment["attempt"]))
        if key in self._runs:
            return
        if key in self._unacked:
            self._send_soon(self._unacked[key])
            return
        if self._stopping:
            log.warning("stopping: not starting %s attempt %d", *key)
            return
        log.info("assigned %s attempt %d (%s)", key[0], key[1], assignment["type"])
        task = asyncio.create_task(self._run_action(key, assignment))
        self._runs[key] = _Run(task, assignment)

    def _on_cancel(self, key: RunKey) -> None:
        run = self._runs.get(key)
        # Only runs in flight: a finished run keeps its result, and a run never
        # held needs no answer (the server decides its state itself).
        if run is not None:
            log.info("cancelling %s attempt %d", *key)
            run.task.cancel()

    def _on_resize(self, resize: Resize) -> None:
        """Hold a run to the cores, and the GPUs, the server now gives it (what it
        took back is already counted free)."""
        key = (str(resize["action"]), int(resize["attempt"]))
        cpus = float(resize["allocation"]["cpu"])
        run = self._runs.get(key)
        if run is None:  # finished already, or an attempt this agent never held
            log.debug("ignoring resize of %s attempt %d: not running here", *key)
            return
        held = float(run.assignment["allocation"].get("cpu", 0))
        held_gpus = [str(gpu) for gpu in run.assignment.get("gpus") or ()]
        gpus = [str(gpu) for gpu in resize.get("gpus", held_gpus)]
        # GPUs only ever go down, to some of those held.
        fewer_gpus = set(gpus) < set(held_gpus)
        if cpus <= 0 or (cpus == held and not fewer_gpus):
            log.debug("ignoring resize of %s attempt %d to cpu %g from %g", *key, cpus, held)
            return
        log.info("resizing %s attempt %d to cpu %g from %g, gpus %s", *key, cpus, held, gpus)
        run.assignment["allocation"] = {**resize["allocation"]}
        run.assignment["units"] = int(resize["units"])
        if fewer_gpus:
            run.assignment["gpus"] = gpus
        executor = self._executors.get(run.assignment["type"])
        if isinstance(executor, ResizableExecutor):
            executor.resize(run.assignment)

    def _send_soon(self, message: Mapping[str, Any]) -> None:
        asyncio.get_running_loop().create_task(self._send(message))

    # -- running ---------------------------------------------------------------

    async def _run_action(self, key: RunKey, assignment: Assignment) -> None:
        assert self._slots is not None
        started_at: float | None = None
        gathering: Gathering | None = None
        try:
            executor = self._executors.get(assignment["type"])
            if isinstance(executor, BatchExecutor):
                gathering = self._gathering(assignment, executor)
                gathering.join(key, assignment)
                outcome = await gathering.outcome(key)
            else:
                async with self._batch_turn(assignment), self._slots:
                    started_at = time.time()
                    await self._send_started(key, started_at)
                    outcome = await self._execute(whole_batch(assignment))
        except asyncio.CancelledError:
            if key in self._abandoned:
                self._runs.pop(key, None)
                raise
            outcome = Outcome(
                state="cancelled",
                error="cancelled",
                started_at=gathering.started_at if gathering is not None else started_at,
                finished_at=time.time(),
            )
        result = self._result(key, outcome)
        self._unacked[key] = result
        if self._flushed is not None:
            self._flushed.clear()
        self._runs.pop(key, None)
        log.info("finished %s attempt %d: %s %s", key[0], key[1], outcome.state, outcome.error)
        await self._send(result)

    async def _send_started(self, key: RunKey, started_at: float) -> None:
        started: Started = {
            "type": "started",
            "action": key[0],
            "attempt": key[1],
            "started_at": started_at,
        }
        await self._send(started)

    def _gathering(self, assignment: Assignment, executor: BatchExecutor) -> Gathering:
        """The open gathering of the assignment's batch, or a new one (a batch of one alone)."""
        batch = assignment.get("batch_id")
        size = assignment.get("batch_size", 1) if batch else 1
        joining = self._gatherings.get(batch) if batch else None
        if joining is not None and joining.open:
            return joining

        async def run(gathering: Gathering) -> dict[RunKey, Outcome]:
            assert self._slots is not None
            async with self._slots:
                started_at = time.time()
                members = gathering.begin(started_at)
                if not members:  # all left while it waited for a slot
                    return {}
                for key in members:
                    await self._send_started(key, started_at)
                try:
                    outcomes = await executor.execute_batch(list(members.values()))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.exception("executor %s crashed on batch %s", assignment["type"], batch)
                    outcomes = [Outcome.invalid(f"executor error: {exc!r}")] * len(members)
            return dict(zip(members, outcomes, strict=True))

        gathering = Gathering(size, run)
        if batch:
            self._gatherings[batch] = gathering
            gathering.when_done(lambda: self._forget_gathering(batch, gathering))
        return gathering

    def _forget_gathering(self, batch: str, gathering: Gathering) -> None:
        if self._gatherings.get(batch) is gathering:  # not a later one of the same batch
            del self._gatherings[batch]

    @contextlib.asynccontextmanager
    async def _batch_turn(self, assignment: Assignment) -> AsyncIterator[None]:
        """Wait for this member's turn in its batch: members run one at a time."""
        batch = assignment.get("batch_id")
        if not batch or assignment.get("batch_size", 1) <= 1:
            yield
            return
        lock, users = self._batches.get(batch, (asyncio.Lock(), 0))
        self._batches[batch] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._batches[batch]
            if users <= 1:
                del self._batches[batch]
            else:
                self._batches[batch] = (lock, users - 1)

    async def _execute(self, assignment: Assignment) -> Outcome:
        executor = self._executors.get(assignment["type"])
        if executor is None:
            return Outcome.invalid(
                f"no executor for {assignment['type']!r} on this node "
                f"(it has {sorted(self._executors)})"
            )
        try:
            return await executor.execute(assignment)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("executor %s crashed on %s", assignment["type"], assignment["id"])
            return Outcome.invalid(f"executor error: {exc!r}")

    @staticmethod
    def _result(key: RunKey, outcome: Outcome) -> Result:
        return {
            "type": "result",
            "action": key[0],
            "attempt": key[1],
            "state": outcome.state,
            "exit_code": outcome.exit_code,
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "stdout_truncated": outcome.stdout_truncated,
            "stderr_truncated": outcome.stderr_truncated,
            "error": outcome.error,
            "started_at": outcome.started_at,
            "finished_at": outcome.finished_at,
        }
