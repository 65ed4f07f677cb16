"""Who is asking, from where: set once per request or websocket, read by record_event."""

import contextvars
import ipaddress
import uuid
from dataclasses import dataclass, field

from django.conf import settings


@dataclass(frozen=True)
class RequestContext:
    source_ip: str | None = None
    user_agent: str = ""
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)


_current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar("audit_request", default=None)


def current() -> RequestContext:
    return _current.get() or RequestContext()


def bind(ctx: RequestContext) -> contextvars.Token:
    return _current.set(ctx)


def unbind(token: contextvars.Token) -> None:
    _current.reset(token)


def _valid_ip(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return None


def client_ip(peer: str | None, forwarded_for: str | None) -> str | None:
    """The client address: the socket peer, unless TRUSTED_PROXY_COUNT proxies append to
    X-Forwarded-For, in which case the address that the outermost trusted proxy saw.
    A client-supplied header alone never changes the answer."""
    trusted = settings.TRUSTED_PROXY_COUNT
    if trusted and forwarded_for:
        hops = [h for h in (part.strip() for part in forwarded_for.split(",")) if h]
        if len(hops) >= trusted:
            candidate = _valid_ip(hops[-trusted])
            if candidate:
                return candidate
    return _valid_ip(peer) if peer else None


def from_django_request(request) -> RequestContext:
    meta = request.META
    rid = meta.get("HTTP_X_REQUEST_ID", "")
    if not (rid and len(rid) <= 64 and rid.replace("-", "").isalnum()):
        rid = uuid.uuid4().hex
    return RequestContext(
        source_ip=client_ip(meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR")),
        user_agent=meta.get("HTTP_USER_AGENT", "")[:400],
        request_id=rid,
    )


def from_scope(scope) -> RequestContext:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    peer = (scope.get("client") or [None])[0]
    return RequestContext(
        source_ip=client_ip(peer, headers.get("x-forwarded-for")),
        user_agent=headers.get("user-agent", "")[:400],
    )
