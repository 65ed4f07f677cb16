"""What account verbs tell the audit log, without this app importing it.

Accounts sit at the bottom of the import graph, so they cannot call the audit app;
the audit app connects its recorder here when it starts (``AuditConfig.ready``) and
every call below lands in the same transaction as the verb that made it."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured
from django.db import models


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    DENIED = "denied", "Denied"
    FAILURE = "failure", "Failure"


_recorder: Callable | None = None
_refuser: Callable | None = None


def connect(*, recorder: Callable, refuser: Callable) -> None:
    global _recorder, _refuser
    _recorder, _refuser = recorder, refuser


def _connected(fn: Callable | None) -> Callable:
    # An account change that cannot be audited must not happen quietly.
    if fn is None:
        raise ImproperlyConfigured("No audit recorder is connected: add 'audit' to INSTALLED_APPS.")
    return fn


def record_event(**event):
    """Append one audit event (see ``audit.recording`` for the fields)."""
    return _connected(_recorder)(**event)


def record_refusal(**refusal) -> None:
    """Count one anonymous refusal against this request's source address."""
    _connected(_refuser)(**refusal)
