"""Checks on every request before any view runs: what no view can accept anyway."""

from django.core.exceptions import SuspiciousOperation


class HostileRequest(SuspiciousOperation):
    """Answered 400 by ``console.views.bad_request`` (JSON under /api/), with this message."""


class RefuseNulMiddleware:
    """A NUL byte in the path or the query string: PostgreSQL text cannot hold one, so a
    lookup with it would fail in the database; refuse it here, once, for every URL."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any("\x00" in key or any("\x00" in v for v in values)
                                         for key, values in request.GET.lists()):
            raise HostileRequest("The URL contains a NUL character.")
        return self.get_response(request)
