"""Periodic work, gathered from each app's tasks.SCHEDULE.

Each app's ``tasks.py`` may define ``SCHEDULE = {"name": (seconds, "dotted.task.path")}``.
With Redis, Celery beat runs them; without it, ``InProcessScheduler`` calls them on a
thread of the serving process.
"""

import importlib
import logging
import threading
import time

logger = logging.getLogger(__name__)

APPS = ("instances", "monitoring", "billing", "audit")


def entries() -> dict[str, tuple[float, str]]:
    found: dict[str, tuple[float, str]] = {}
    for app in APPS:
        found.update(getattr(importlib.import_module(f"{app}.tasks"), "SCHEDULE", {}))
    return found


def beat_schedule() -> dict:
    return {name: {"task": path, "schedule": seconds} for name, (seconds, path) in entries().items()}


def _resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class InProcessScheduler(threading.Thread):
    """Runs every scheduled task at its period, one after another, until stopped."""

    def __init__(self, tick: float = 1.0):
        super().__init__(name="schedule", daemon=True)
        self.tick = tick
        self.stopping = threading.Event()

    def run(self) -> None:
        from django.db import close_old_connections

        due = {name: 0.0 for name in entries()}
        while not self.stopping.is_set():
            now = time.monotonic()
            for name, (seconds, path) in entries().items():
                if now < due.get(name, 0.0):
                    continue
                due[name] = now + seconds
                try:
                    _resolve(path)()
                except Exception:
                    logger.exception("scheduled task %s failed", name)
                finally:
                    close_old_connections()
            self.stopping.wait(self.tick)

    def stop(self) -> None:
        self.stopping.set()
