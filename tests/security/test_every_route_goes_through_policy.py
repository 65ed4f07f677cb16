"""Every page, API endpoint and websocket consumer asks console.policy before it answers;
the few that may not (nobody is signed in yet, or another credential guards them) are
named below, each with its reason. A new route that forgets the policy fails here."""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.views import APIView

from console import policy
from gpuconsole.routing import websocket_urlpatterns

# view (module.name) -> why it answers without the policy
PUBLIC_VIEWS = {
    "console.views.LoginView": "signing in: nobody is signed in yet",
    "console.views.logout_view": "signing out ends whatever session there is",
    "console.views.login_verify": "the second step of signing in, before the session has a user",
    "console.views.login_enrol": "enrolling a second factor during sign-in, before the session has a user",
    "console.views.accept_invite": "an invitation link: its single-use key is the credential; it may create the account",
    "console.sso.AuthenticateView": "SSO sign-in start: redirects to the identity provider",
    "console.sso.CallbackView": "SSO callback: the identity provider's signed answer is the credential",
    "console.views.healthz": "load balancer health check, says only 'ok'",
    "console.api.views.ObtainTokenView": "exchanges a password (and second factor) for an API token",
    "monitoring.operators.metrics": "/metrics: checks its own operator API token or operator session",
    "monitoring.api.agent_allocations": "host agents, authenticated by their host token",
    "monitoring.health_api.agent_upload": "host agents upload diagnostics, authenticated by their host token",
    "audit.api.PublicKeyView": "the audit log's public key, published for offline verification",
    "drf_spectacular.views.SpectacularAPIView": "the OpenAPI schema is public documentation",
    "drf_spectacular.views.SpectacularSwaggerView": "the API docs page is public documentation",
}

# consumer class (module.name) -> why it answers without the policy
PUBLIC_CONSUMERS = {
    "monitoring.consumers.AgentConsumer": "host agents, authenticated by their host token header",
    "gpuconsole.routing.NoRoute": "refuses every connection at the handshake",
}


def _routes(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _routes(p.url_patterns, prefix + str(p.pattern))
        else:
            assert isinstance(p, URLPattern)
            yield prefix + str(p.pattern), p.callback


def _name(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _view_of(callback):
    """The class behind a class-based or DRF view, else the function itself."""
    return getattr(callback, "cls", None) or getattr(callback, "view_class", None) or callback


def _asks_policy(callback) -> bool:
    view = _view_of(callback)
    if isinstance(view, type) and issubclass(view, APIView):
        return policy.Policy in view.permission_classes
    if isinstance(view, type):
        return issubclass(view, policy.PolicyRequiredMixin)
    return getattr(callback, "policy_action", None) in policy.ACTIONS


def _consumers(patterns):
    for route in patterns:
        app = route.callback
        while not hasattr(app, "consumer_class"):
            app = getattr(app, "inner", None) or app.application
        yield str(route.pattern), app.consumer_class


def test_every_url_asks_the_policy_or_is_public_for_a_reason():
    routes = list(_routes(get_resolver().url_patterns))
    assert len(routes) > 100  # the API's routers are walked too
    unguarded = sorted(
        f"{route} -> {_name(_view_of(cb))}"
        for route, cb in routes
        if _name(_view_of(cb)) not in PUBLIC_VIEWS and not _asks_policy(cb)
    )
    assert unguarded == []


def test_every_drf_view_lists_the_policy_permission():
    for route, cb in _routes(get_resolver().url_patterns):
        view = _view_of(cb)
        if isinstance(view, type) and issubclass(view, APIView) and _name(view) not in PUBLIC_VIEWS:
            assert policy.Policy in view.permission_classes, route


def test_every_public_view_is_still_routed():
    routed = {_name(_view_of(cb)) for _, cb in _routes(get_resolver().url_patterns)}
    assert set(PUBLIC_VIEWS) - routed == set()


def test_every_websocket_consumer_asks_the_policy_or_is_public_for_a_reason():
    found = dict(_consumers(websocket_urlpatterns))
    assert "ws/live/" in found
    unguarded = sorted(
        f"{route} -> {_name(c)}"
        for route, c in found.items()
        if _name(c) not in PUBLIC_CONSUMERS and not issubclass(c, policy.PolicyConsumer)
    )
    assert unguarded == []
    assert set(PUBLIC_CONSUMERS) <= {_name(c) for c in found.values()}


def test_an_unknown_action_is_an_error_not_a_refusal(bob):
    with pytest.raises(KeyError):
        policy.may(bob, "fleet.veiw")
