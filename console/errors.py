"""Errors every app may raise and the pages and API answer the same way."""

from django.core.exceptions import SuspiciousOperation


class Conflict(Exception):
    """A request the current state of its object does not allow (answers 409 with ``code``)."""

    code = "conflict"


class HostileRequest(SuspiciousOperation):
    """Answered 400 by ``console.views.bad_request`` (JSON under /api/), with this message."""
