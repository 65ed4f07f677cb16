"""HTTP through Django; websockets through each app's routing (agents and browsers)."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")

from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from console.edge import RefuseNulWebsocket  # noqa: E402
from gpuconsole import serving  # noqa: E402
from gpuconsole.routing import websocket_urlpatterns  # noqa: E402

serving.install()  # bounded websocket frames and buffering under daphne

if settings.SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    http_app = ASGIStaticFilesHandler(django_app)
else:
    http_app = django_app

if settings.INPROCESS_SCHEDULER:
    from gpuconsole.schedule import InProcessScheduler

    InProcessScheduler().start()

application = ProtocolTypeRouter({"http": http_app, "websocket": RefuseNulWebsocket(URLRouter(websocket_urlpatterns))})

# Everything imported so far lives as long as the process: move it out of the cyclic
# collector's reach, so a full collection (every few seconds under the live fan-out's
# allocations) walks only what was made since, not all of Django (85-167 ms stalls).
gc.freeze()
