"""Settings from the environment; the embedded default needs nothing set.

``DATABASE_URL`` switches SQLite to Postgres; ``REDIS_URL`` switches the
in-memory channel layer and in-process scheduler to Redis and Celery.
"""

from pathlib import Path

import environ

from tangram_policy.registry import POLICIES

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()

DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="tangram-embedded-insecure-key")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "apps.core",
    "apps.tenants",
    "apps.inventory",
    "apps.actions",
    "apps.scheduling",
    "apps.dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "tangram_web.urls"
ASGI_APPLICATION = "tangram_web.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "frontend" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'tangram.sqlite3'}")
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A bounded pool per process: hundreds of concurrent long-polls and agent
    # sockets share a few connections instead of exhausting the server's.
    DATABASES["default"]["OPTIONS"] = {
        "pool": {
            "min_size": 1,
            "max_size": env.int("TANGRAM_DB_POOL_SIZE", default=16),
            "timeout": 30,
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "capacity": 5000, "expiry": 30},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# "inprocess": a scheduler thread inside the web process (embedded default).
# "celery": rounds run by a Celery worker (needs REDIS_URL as the broker).
TANGRAM_SCHEDULER = env.str("TANGRAM_SCHEDULER", default="celery" if REDIS_URL else "inprocess")
if TANGRAM_SCHEDULER not in ("inprocess", "celery"):
    raise environ.ImproperlyConfigured("TANGRAM_SCHEDULER must be 'inprocess' or 'celery'")
if TANGRAM_SCHEDULER == "celery" and not REDIS_URL:
    raise environ.ImproperlyConfigured("TANGRAM_SCHEDULER=celery needs REDIS_URL")
TANGRAM_POLICY = env.str("TANGRAM_POLICY", default="tangram")
if TANGRAM_POLICY not in POLICIES:
    raise environ.ImproperlyConfigured(
        f"TANGRAM_POLICY={TANGRAM_POLICY!r} is not one of {sorted(POLICIES)}"
    )
#: Seconds between safety-net scheduling rounds (and lease checks).
TANGRAM_TICK_S = env.float("TANGRAM_TICK_S", default=2.0)
#: An agent silent for this long loses its node's actions back to the queue.
TANGRAM_LEASE_S = env.float("TANGRAM_LEASE_S", default=10.0)
TANGRAM_HEARTBEAT_S = env.float("TANGRAM_HEARTBEAT_S", default=2.0)
TANGRAM_MAX_ATTEMPTS = env.int("TANGRAM_MAX_ATTEMPTS", default=5)
TANGRAM_MAX_BULK = env.int("TANGRAM_MAX_BULK", default=1000)
TANGRAM_MAX_PAYLOAD_BYTES = env.int("TANGRAM_MAX_PAYLOAD_BYTES", default=1024 * 1024)
TANGRAM_OUTPUT_CAP_BYTES = env.int("TANGRAM_OUTPUT_CAP_BYTES", default=64 * 1024)
TANGRAM_MAX_TIMEOUT_S = env.float("TANGRAM_MAX_TIMEOUT_S", default=3600.0)
TANGRAM_DEFAULT_TIMEOUT_S = env.float("TANGRAM_DEFAULT_TIMEOUT_S", default=60.0)
TANGRAM_MAX_WAIT_S = env.float("TANGRAM_MAX_WAIT_S", default=60.0)
#: A trajectory none of whose actions is queued, placed or has finished for this
#: long has ended: its runs, by position and type, teach the policy what trajectories of
#: its job have left (``trajectories_fold_ended``). Longer than a model thinks.
TANGRAM_TRAJECTORY_IDLE_S = env.float("TANGRAM_TRAJECTORY_IDLE_S", default=300.0)
#: The demo tenant's token in the embedded mode (random when unset).
TANGRAM_DEMO_TOKEN = env.str("TANGRAM_DEMO_TOKEN", default="")
DATA_UPLOAD_MAX_MEMORY_SIZE = TANGRAM_MAX_PAYLOAD_BYTES * 8

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.tenants.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "EXCEPTION_HANDLER": "apps.core.api.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tangram API",
    "DESCRIPTION": "Submit actions, wait for results, read quotas and nodes.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The docs page's assets come from the package, not a CDN: it works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "frontend" / "static"]
LOGIN_URL = "/admin/login/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("TANGRAM_LOG_LEVEL", default="INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}
