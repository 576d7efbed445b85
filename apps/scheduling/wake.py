"""Waking the scheduler after a submit or a finish, in either mode.

``celery``: enqueue one round task unless one is already pending (a Redis
flag coalesces bursts of submits into one round). ``inprocess``: set the
in-process runner's event.
"""

from __future__ import annotations

import logging
from functools import cache

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

ROUND_PENDING_KEY = "tangram:scheduler:round-pending"


@cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)


def scheduler_wake() -> None:
    if settings.TANGRAM_SCHEDULER == "inprocess":
        from apps.scheduling.runner import runner

        runner.wake()
        return
    from apps.scheduling.tasks import schedule_round_task

    try:
        if redis_client().set(ROUND_PENDING_KEY, "1", nx=True, ex=5):
            schedule_round_task.delay()
    except Exception:
        logger.warning("could not wake the scheduler; the periodic tick will", exc_info=True)
