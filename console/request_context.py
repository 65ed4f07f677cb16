"""Who is asking, from where: set once per request or websocket, read by record_event.

HTTP requests are bound by ``audit.middleware.RequestContextMiddleware``. Websocket
consumers bind their connection's scope around the code that records events::

    from console.request_context import bind_scope

    async def connect(self):
        with bind_scope(self.scope):
            await self.record_connect()   # a database_sync_to_async method calling record_event

``database_sync_to_async`` copies context variables into its thread, so the event gets
the socket's source IP, user agent and a request id (one per connection).
"""

from __future__ import annotations

import contextvars
import ipaddress
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

from django.conf import settings


@dataclass(frozen=True)
class RequestContext:
    source_ip: str | None = None
    user_agent: str = ""
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)


_current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "audit_request", default=None
)


def current() -> RequestContext:
    return _current.get() or RequestContext()


def bind(ctx: RequestContext) -> contextvars.Token:
    return _current.set(ctx)


def unbind(token: contextvars.Token) -> None:
    _current.reset(token)


@contextmanager
def bound(ctx: RequestContext) -> Iterator[RequestContext]:
    token = bind(ctx)
    try:
        yield ctx
    finally:
        unbind(token)


def bind_scope(scope) -> AbstractContextManager[RequestContext]:
    """Context manager for Channels consumers: binds the ASGI scope's client address,
    user agent and a per-connection request id (kept in the scope, so every event of
    one websocket connection shares it)."""
    ctx = scope.get("audit_context")
    if ctx is None:
        ctx = scope["audit_context"] = from_scope(scope)
    return bound(ctx)


def _valid_ip(value: str) -> str | None:
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        return None
    if getattr(address, "scope_id", None):
        return None  # "fe80::1%eth0" names an interface of the sender, not a client
    return str(address)


def client_ip(peer: str | None, forwarded_for: str | None) -> str | None:
    """The client address: the socket peer, unless TRUSTED_PROXY_COUNT proxies append to
    X-Forwarded-For, in which case the address that the outermost trusted proxy saw.
    A client-supplied header alone never changes the answer."""
    trusted = getattr(settings, "TRUSTED_PROXY_COUNT", 0)
    if trusted and forwarded_for:
        hops = [h for h in (part.strip() for part in forwarded_for.split(",")) if h]
        if len(hops) >= trusted:
            candidate = _valid_ip(hops[-trusted])
            if candidate:
                return candidate
    return _valid_ip(peer) if peer else None


def _request_id(value: str) -> str:
    if value and len(value) <= 64 and value.replace("-", "").isalnum() and value.isascii():
        return value
    return uuid.uuid4().hex


def from_django_request(request) -> RequestContext:
    meta = request.META
    return RequestContext(
        source_ip=client_ip(meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR")),
        user_agent=meta.get("HTTP_USER_AGENT", "")[:400],
        request_id=_request_id(meta.get("HTTP_X_REQUEST_ID", "")),
    )


def from_scope(scope) -> RequestContext:
    headers = {
        k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
    }
    peer = (scope.get("client") or [None])[0]
    return RequestContext(
        source_ip=client_ip(peer, headers.get("x-forwarded-for")),
        user_agent=headers.get("user-agent", "").replace("\x00", "")[:400],  # HTTP refuses NUL in console.edge
        request_id=_request_id(headers.get("x-request-id", "")),
    )


# Demo seeding replays past actions: their events carry the time the action is said to
# have happened. Nothing else sets this; record_event otherwise stamps "now".
_recorded_at: contextvars.ContextVar = contextvars.ContextVar("audit_recorded_at", default=None)


def recorded_time():
    return _recorded_at.get()


@contextmanager
def recorded_at(moment) -> Iterator[None]:
    """Events recorded inside carry ``moment`` as their time (demo history only)."""
    token = _recorded_at.set(moment)
    try:
        yield
    finally:
        _recorded_at.reset(token)


def request_ip(request) -> str | None:
    """The client address of a Django request, by the same rule as the audit log
    (django-axes counts sign-in failures per this address)."""
    meta = request.META
    return client_ip(meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR"))
