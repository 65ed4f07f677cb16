"""Checks on every request before any view runs: what no view can accept anyway."""

import logging

from django.http.multipartparser import MultiPartParserError

from .errors import HostileRequest

log = logging.getLogger(__name__)

NUL = "\x00"


def nul_in_url(request) -> str | None:
    """What part of the URL holds a NUL, as a sentence; None when none does."""
    if NUL in request.path:
        return "The URL path contains a NUL character."
    return _nul_in_pairs(request.GET.lists(), "query parameter")


def nul_in_form(request) -> str | None:
    """The same for a form body, url-encoded or multipart (whose file names Django's
    parser already strips of unprintable characters)."""
    return _nul_in_pairs(request.POST.lists(), "field")


def nul_in_headers(request) -> str | None:
    """The same for a header, and for a cookie (a quoted one may spell NUL as \\000)."""
    for key, value in request.META.items():
        if key.startswith("HTTP_") and isinstance(value, str) and NUL in value:
            return f"The {key[5:].replace('_', '-').title()} header contains a NUL character."
    return _nul_in_pairs(((key, [value]) for key, value in request.COOKIES.items()), "cookie")


def _nul_in_pairs(pairs, what: str) -> str | None:
    for key, values in pairs:
        if NUL in key or any(NUL in value for value in values):
            return f"The {what} '{key.replace(NUL, '')[:60]}' contains a NUL character."
    return None


class RefuseNulMiddleware:
    """A NUL (U+0000) anywhere a request carries text: the path, the query string, a
    header or cookie, a form field's name or value. PostgreSQL text cannot hold
    one, and a choice, a lookup or a filter would take it to the database before any
    field validator runs (Django's forms.CharField prohibits NUL, but ModelChoiceField,
    django-filter's filters and the sign-in's lockout and audit read raw values);
    refuse it here, once, with a 400 naming the field. JSON bodies are checked by the
    API's parser (``console.api.parsers``). Bad input, not a server error: one INFO
    line, no traceback."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            problem = nul_in_url(request) or nul_in_headers(request) or nul_in_form(request)
        except MultiPartParserError:
            problem = "The multipart body is malformed."
        if problem is None:
            return self.get_response(request)
        from .views import bad_request

        log.info("refused %s %r: %s", request.method, request.path[:200], problem)
        response = bad_request(request, HostileRequest(problem))
        response._has_been_logged = True  # the line above, not django.request's warning
        return response


class RefuseNulWebsocket:
    """The same for a websocket handshake (ASGI): a NUL in its path, query string, a
    header or a cookie closes it before any consumer, session or token lookup runs (an
    HTTP 403 at the handshake)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        problem = _nul_in_handshake(scope) if scope["type"] == "websocket" else None
        if problem is None:
            return await self.app(scope, receive, send)
        log.info("refused a websocket to %r: %s", scope.get("path", "")[:200], problem)
        await receive()  # websocket.connect
        await send({"type": "websocket.close"})


def _nul_in_handshake(scope) -> str | None:
    from urllib.parse import unquote_to_bytes

    from django.http.cookie import parse_cookie

    if NUL in scope.get("path", ""):
        return "The URL path contains a NUL character."
    if b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
        return "The query string contains a NUL character."
    for name, value in scope.get("headers", []):
        if b"\x00" in value:
            return f"The {name.decode('latin-1').title()} header contains a NUL character."
        if name.lower() == b"cookie" and any(NUL in k + v for k, v in parse_cookie(value.decode("latin-1")).items()):
            return "A cookie contains a NUL character."
    return None
