"""The project's ASGI app with static files served, as ``runserver`` would serve them.

``tangram_web.asgi`` serves no static files, and the browser test starts the
plain daphne CLI; this wrapper lets that server deliver the dashboard's
script and stylesheet from ``frontend/static/``.
"""

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from tangram_web.asgi import application as tangram_application

application = ASGIStaticFilesHandler(tangram_application)
