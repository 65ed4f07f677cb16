"""/ws/agent/: host agents, authenticated by a host token header (no session, no
origin: agents are not browsers). /ws/live/: browsers, session auth (with the second
factor the role needs), origin checked."""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from console.twofactor import SecondFactorGuard

from .consumers import AgentConsumer, LiveConsumer

websocket_urlpatterns = [
    path("ws/agent/", AgentConsumer.as_asgi()),
    path("ws/live/", AllowedHostsOriginValidator(AuthMiddlewareStack(SecondFactorGuard(LiveConsumer.as_asgi())))),
]
