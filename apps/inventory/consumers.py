"""The agents' websocket: authenticate, register, then relay both ways.

Logic lives in the services; this consumer only parses frames, calls them and
forwards what the scheduler pushes to the node's group.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from rest_framework import serializers

from apps.actions.services import action_mark_started, action_record_result
from apps.core.api import flatten_errors
from apps.core.events import agent_group
from apps.core.exceptions import ApplicationError
from apps.inventory import selectors, services
from apps.inventory.serializers import MESSAGES, checked_message
from tangram_agent.protocol import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, RESIZE_PROTOCOL

logger = logging.getLogger(__name__)


def _bearer(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            keyword, _, raw = value.decode(errors="replace").partition(" ")
            if keyword == "Bearer":
                return raw.strip()
    return ""


#: Clock differences up to this are left alone: a shift would add the message's
#: transit time, while NTP keeps healthy clocks within milliseconds.
CLOCK_SKEW_TOLERANCE_S = 1.0
#: Recent (server - agent) clock samples kept; their minimum is the estimate.
CLOCK_SAMPLES = 16


class AgentConsumer(AsyncJsonWebsocketConsumer):
    node_id: Any = None
    group: str | None = None
    #: The protocol its agent registered with.
    protocol = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clock_samples: deque[float] = deque(maxlen=CLOCK_SAMPLES)
        #: Seconds added to the agent's times (start, finish) to put them on the server's clock.
        self.clock_offset_s = 0.0

    def _sample_clock(self, content: dict[str, Any]) -> None:
        """Measure the agent's clock from a message's ``sent_at``.

        Each sample is the skew plus the message's transit time, so the minimum
        of recent samples is the best estimate. ACT is finish (agent) less
        submit (server): a skewed agent would report it wrong by the skew.
        """
        sent_at = content.get("sent_at")
        if isinstance(sent_at, bool) or not isinstance(sent_at, int | float):
            return
        self._clock_samples.append(time.time() - float(sent_at))
        skew = min(self._clock_samples)
        offset = skew if abs(skew) > CLOCK_SKEW_TOLERANCE_S else 0.0
        if offset and not self.clock_offset_s:
            logger.warning(
                "node %s: agent clock off by %.1f s; shifting its times", self.node_id, -skew
            )
        self.clock_offset_s = offset

    def _on_server_clock(self, at: Any) -> Any:
        return float(at) + self.clock_offset_s if at is not None else None

    async def connect(self) -> None:
        raw = _bearer(self.scope)
        token = raw and await database_sync_to_async(selectors.agent_token_authenticate)(raw=raw)
        if not token:
            await self.close(code=4401)
            return
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if self.node_id is not None:
            logger.info("agent of node %s disconnected (%s)", self.node_id, code)

    async def _refuse(self, message: str) -> None:
        await self.send_json({"type": "error", "message": message})
        await self.close(code=4400)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if self.node_id is None and kind != "register":
            await self._refuse("the first message must be 'register'")
            return
        try:
            sent = content
            if kind in MESSAGES:
                content = checked_message(kind, content)
            if kind == "register":
                await self._register(content)
            elif kind == "heartbeat":
                self._sample_clock(content)
                resend, stale, resizes = await database_sync_to_async(services.node_heartbeat)(
                    node_id=self.node_id,
                    running=content.get("running", []),
                    warm=content.get("warm"),
                )
                await self._send_assignments(resend, stale)
                for resize in resizes:
                    await self._send_resize(resize)
            elif kind == "started":
                await database_sync_to_async(action_mark_started)(
                    node_id=self.node_id,
                    action_id=content["action"],
                    attempt=content["attempt"],
                    started_at=self._on_server_clock(content["started_at"]),
                )
            elif kind == "result":
                result = {
                    **content,
                    "started_at": self._on_server_clock(content.get("started_at")),
                    "finished_at": self._on_server_clock(content["finished_at"]),
                }
                await database_sync_to_async(action_record_result)(
                    node_id=self.node_id, result=result
                )
                # As sent: the agent matches the ack to what it keeps.
                await self.send_json(
                    {"type": "ack", "action": sent["action"], "attempt": sent["attempt"]}
                )
            else:
                await self._refuse(f"unknown message type {kind!r}")
        except serializers.ValidationError as exc:
            fields = "; ".join(
                f"{field}: {' '.join(messages)}"
                for field, messages in flatten_errors(exc.detail).items()
            )
            await self._refuse(f"malformed {kind} message: {fields}")
        except (KeyError, TypeError, ValueError) as exc:
            await self._refuse(f"malformed {kind} message: {exc!r}")

    async def _register(self, content: dict[str, Any]) -> None:
        protocol = content.get("protocol")
        if protocol not in range(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION + 1):
            await self._refuse(
                f"protocol {protocol!r} is not one of {MIN_PROTOCOL_VERSION}..{PROTOCOL_VERSION}"
            )
            return
        try:
            node, resend, stale = await database_sync_to_async(services.node_register)(
                message=content
            )
        except ApplicationError as exc:
            await self._refuse(f"register refused: {exc.message}")
            return
        self.node_id = node.id
        self.protocol = protocol
        self._sample_clock(content)
        self.group = agent_group(str(node.id))
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send_json(
            {
                "type": "registered",
                "node_id": str(node.id),
                "heartbeat_interval_s": settings.TANGRAM_HEARTBEAT_S,
                "lease_s": settings.TANGRAM_LEASE_S,
            }
        )
        await self._send_assignments(resend, stale)
        logger.info("agent registered node %s (%s)", node.name, node.id)

    async def _send_assignments(self, assign: list[Any], cancel: list[Any]) -> None:
        for assignment in assign:
            await self.send_json({"type": "assign", "action": assignment})
        for ref in cancel:
            await self.send_json({"type": "cancel", **ref})

    async def agent_assign(self, event: dict[str, Any]) -> None:
        for assignment in event["assignments"]:
            await self.send_json({"type": "assign", "action": assignment})

    async def agent_resize(self, event: dict[str, Any]) -> None:
        await self._send_resize(event["resize"])

    async def _send_resize(self, resize: dict[str, Any]) -> None:
        """As ``resize``, or ``shrink`` to an older agent (which the server only shrinks)."""
        kind = "resize" if self.protocol >= RESIZE_PROTOCOL else "shrink"
        await self.send_json({"type": kind, **resize})

    async def agent_cancel(self, event: dict[str, Any]) -> None:
        await self.send_json(
            {"type": "cancel", "action": event["action"], "attempt": event["attempt"]}
        )
