"""Errors every app may raise and the pages and API answer the same way."""

from django.core.exceptions import SuspiciousOperation


class Conflict(Exception):
    """A request the current state of its object does not allow (answers 409 with ``code``)."""

    code = "conflict"


class Refused(ValueError):
    """A request that cannot be done as asked, whatever the state (answers 400 with ``code``)."""

    code = "invalid"


class HostileRequest(SuspiciousOperation):
    """Answered 400 by ``console.views.bad_request`` (JSON under /api/), with this message."""
