"""Settings for the test suite: real Postgres and Redis unless the environment says otherwise."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tangram")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
# Unit tests run rounds themselves; the e2e tests start a real Celery worker.
os.environ.setdefault("TANGRAM_SCHEDULER", "inprocess")

from tangram_web.settings import *  # noqa: E402,F403

# Parallel runs on one machine (a developer beside CI) each set their own.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("TANGRAM_TEST_DB", "test_tangram")}  # noqa: F405
