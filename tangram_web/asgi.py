"""HTTP through Django; websockets for agents and dashboards through Channels."""

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tangram_web.settings")
# The dashboard's few static files are served by the app itself, so that daphne
# alone is a complete server; a deployment may put a reverse proxy in front.
django_asgi_app = ASGIStaticFilesHandler(get_asgi_application())

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from apps.dashboard.routing import websocket_urlpatterns as dashboard_ws  # noqa: E402
from apps.inventory.consumers import AgentConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AuthMiddlewareStack(
            URLRouter([path("ws/agent/", AgentConsumer.as_asgi()), *dashboard_ws])
        ),
    }
)
