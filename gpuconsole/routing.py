"""All websocket routes. Each app's ``routing.py`` owns its paths and its own guards
(agents: host token header; browsers: origin check + session)."""

from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import re_path

from monitoring.routing import websocket_urlpatterns as monitoring_routes


class NoRoute(AsyncWebsocketConsumer):
    """Any other path: refused at the handshake (HTTP 403), not a server error, so a
    client given the wrong URL learns so at once."""

    async def connect(self):
        await self.close()


websocket_urlpatterns = [*monitoring_routes, re_path(r"", NoRoute.as_asgi())]
