"""Celery tasks: thin, idempotent wrappers around the scheduling services."""

from __future__ import annotations

import contextlib

from celery import shared_task

from apps.scheduling import services
from apps.scheduling.wake import ROUND_PENDING_KEY, redis_client


@shared_task(name="tangram.scheduling.round", queue="scheduler", soft_time_limit=30, time_limit=60)
def schedule_round_task() -> int:
    # Clear the coalescing flag before reading the snapshot, so a submit that
    # lands during this round enqueues the next one.
    with contextlib.suppress(Exception):  # Redis down: the periodic tick still runs rounds
        redis_client().delete(ROUND_PENDING_KEY)
    return services.schedule_round().placed


@shared_task(name="tangram.scheduling.tick", queue="scheduler", soft_time_limit=30, time_limit=60)
def scheduler_tick_task() -> int:
    return services.scheduler_tick().placed
