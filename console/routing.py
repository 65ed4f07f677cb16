"""All websocket routes. Each app's ``routing.py`` owns its paths and its own guards
(agents: host token header; browsers: origin check + session)."""

from monitoring.routing import websocket_urlpatterns as monitoring_routes

websocket_urlpatterns = [*monitoring_routes]
