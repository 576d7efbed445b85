"""The operators' websocket: staff only, a fresh snapshot after every change.

``dashboard.changed`` messages (sent after each commit that touches actions or
nodes) only mark the view stale; one sender task per connection turns them
into at most one snapshot per ``min_interval_s``, always including the last
change, and refreshes every ``refresh_s`` anyway because Redis may drop a
message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.core.events import DASHBOARD_GROUP
from apps.dashboard.events import CLOSE_FORBIDDEN, snapshot_frame
from apps.dashboard.selectors import dashboard_snapshot
from apps.tenants.selectors import Principal, principal_of

logger = logging.getLogger(__name__)


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    #: Snapshots are sent at most this often, however many changes arrive.
    min_interval_s = 0.25
    #: A snapshot is sent at least this often, changes or not.
    refresh_s = 5.0

    principal: Principal | None = None
    _stale: asyncio.Event
    _sender: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        allowed = bool(user and user.is_authenticated and user.is_active and user.is_staff)
        # Accept before closing so that the page receives 4403 and stops retrying;
        # a refusal during the handshake reaches a browser only as 1006.
        await self.accept()
        if not allowed:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.principal = await database_sync_to_async(principal_of)(user=user)
        await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        self._stale = asyncio.Event()
        self._stale.set()
        self._sender = asyncio.create_task(self._send_snapshots())

    async def disconnect(self, code: int) -> None:
        if self._sender is not None:
            self._sender.cancel()
        if self.principal is not None:
            await self.channel_layer.group_discard(DASHBOARD_GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients have nothing to say; whatever they send is ignored."""

    async def dashboard_changed(self, message: dict[str, Any]) -> None:
        self._stale.set()

    async def _renew_membership(self) -> None:
        """The Redis layer forgets group members after a day; idle periods renew it."""
        try:
            await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        except Exception:
            logger.warning("could not renew the dashboard group membership", exc_info=True)

    async def _send_snapshots(self) -> None:
        assert self.principal is not None
        read = database_sync_to_async(dashboard_snapshot)
        while True:
            try:
                await asyncio.wait_for(self._stale.wait(), timeout=self.refresh_s)
            except TimeoutError:
                await self._renew_membership()
            # Cleared before reading, so a change committed during the read marks it stale again.
            self._stale.clear()
            try:
                await self.send_json(snapshot_frame(await read(principal=self.principal)))
            except Exception:
                logger.warning("dashboard snapshot failed; the next refresh retries", exc_info=True)
            await asyncio.sleep(self.min_interval_s)
