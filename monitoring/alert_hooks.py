"""What telemetry asks of whoever keeps alerts, without importing it.

Imports point one way: the alerting app imports monitoring (it evaluates rules on
telemetry), never the reverse. So ingest, inventory, GPU events, health verdicts and the
pages call these functions, and alerting connects its implementation at start-up
(``AlertingConfig.ready`` calls ``connect``). Unconnected, readings open no alert and
the pages list none.

Conditions are keyword arguments of the alert (``key``, ``message``, ``value``,
``threshold``, ``host_id``, ``gpu_id``, ``uuid``, ``instance_id``, ``team_id``,
``severity``, ``category``); kinds, severities and categories are their string values.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

ACTIVE_STATES = ("open", "acknowledged")


class Keeper(Protocol):
    def watch(self, host_id: int, host_name: str) -> Any: ...

    def load_watches(self, items: list[tuple[Any, dict, set[int]]]) -> None: ...

    def raise_alert(self, kind: str, *, now: datetime | None = None, **condition) -> None: ...

    def resolve(self, *keys: str, now: datetime | None = None, why: str = "") -> None: ...

    def is_active(self, key: str) -> bool: ...

    def reconcile(self, kind: str, conditions: list[dict], *, now: datetime | None = None) -> None: ...

    def alerts(self): ...


class NoWatch:
    """Ingest's rule watch when nothing keeps alerts: every reading passes unremarked."""

    def observe(self, *args) -> None:
        pass

    def event(self, *args) -> None:
        pass

    def apply(self) -> None:
        pass

    def forget(self) -> None:
        pass


class Unconnected:
    def watch(self, host_id, host_name):
        return NoWatch()

    def load_watches(self, items) -> None:
        pass

    def raise_alert(self, kind, *, now=None, **condition) -> None:
        pass

    def resolve(self, *keys, now=None, why="") -> None:
        pass

    def is_active(self, key) -> bool:
        return False

    def reconcile(self, kind, conditions, *, now=None) -> None:
        pass

    def alerts(self):
        return None


_keeper: Keeper = Unconnected()


def connect(keeper: Keeper) -> None:
    global _keeper
    _keeper = keeper


def watch(host_id: int, host_name: str):
    """A new agent connection's rule watch (``observe``, ``event``, ``apply``, ``forget``)."""
    return _keeper.watch(host_id, host_name)


def load_watches(items: list[tuple[Any, dict, set[int]]]) -> None:
    """(watch, devices, team ids) of each host of one ingest flush: their rules, read once."""
    _keeper.load_watches(items)


def raise_alert(kind: str, *, now: datetime | None = None, **condition) -> None:
    _keeper.raise_alert(kind, now=now, **condition)


def resolve(*keys: str, now: datetime | None = None, why: str = "") -> None:
    """Resolve the active alert of each key (one query for them all)."""
    _keeper.resolve(*keys, now=now, why=why)


def is_active(key: str) -> bool:
    return _keeper.is_active(key)


def reconcile(kind: str, conditions: list[dict], *, now: datetime | None = None) -> None:
    """The active alerts of ``kind`` become exactly ``conditions``."""
    _keeper.reconcile(kind, conditions, now=now)


def alerts():
    """Every alert, as a team-scoped queryset (``for_user``), or None when nothing keeps
    alerts."""
    return _keeper.alerts()


def active():
    """The open or acknowledged alerts, or None."""
    found = alerts()
    return None if found is None else found.filter(state__in=ACTIVE_STATES)
