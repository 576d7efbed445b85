"""The Celery app: the scheduler worker and its periodic safety tick."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tangram_web.settings")

app = Celery("tangram")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _schedule_tick(sender: Celery, **_: object) -> None:
    from django.conf import settings

    sender.add_periodic_task(
        settings.TANGRAM_TICK_S,
        sender.signature("tangram.scheduling.tick", options={"queue": "scheduler"}),
        name="scheduler tick",
    )
