"""The embedded mode's scheduler: an asyncio task in the web server's event loop.

Rounds run in a worker thread (the ORM is synchronous); a wake from any
thread sets an event in the loop, and a tick runs the safety net.
"""

from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async
from django.conf import settings

from apps.scheduling import services

logger = logging.getLogger(__name__)


class InProcessScheduler:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def wake(self) -> None:
        if self._loop is not None and self._event is not None:
            self._loop.call_soon_threadsafe(self._event.set)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        round_ = database_sync_to_async(services.schedule_round)
        tick = database_sync_to_async(services.scheduler_tick)
        logger.info("in-process scheduler started (policy %s)", settings.TANGRAM_POLICY)
        while True:
            try:
                await asyncio.wait_for(self._event.wait(), timeout=settings.TANGRAM_TICK_S)
                self._event.clear()
                await round_()
            except TimeoutError:
                await tick()
            except Exception:
                logger.exception("scheduling round failed")
                await asyncio.sleep(1)


runner = InProcessScheduler()
