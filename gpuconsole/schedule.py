"""Periodic work, gathered from each app's tasks.SCHEDULE, run by exactly one scheduler.

Each app's ``tasks.py`` may define ``SCHEDULE = {"name": (seconds, "dotted.task.path")}``.
With Redis, Celery beat runs them (``LeasedBeatScheduler``); without it,
``InProcessScheduler`` calls them on a thread of the serving process. Either way a
scheduler sends work only while it holds the deployment's one scheduler lease
(``lease()``), so several ASGI processes, or a second beat started by mistake, stand by
instead of running everything twice; when the holder dies another takes over.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import logging
import os
import threading
import time
import uuid
from pathlib import Path

from celery.beat import Scheduler

logger = logging.getLogger(__name__)

LEASE_S = 60  # a holder that stops renewing is replaced after this long
STANDBY_TICK_S = 5.0  # how often a scheduler without the lease tries to take it
LEASE_NAME = "gpuconsole:scheduler"


def entries() -> dict[str, tuple[float, str]]:
    """Every installed app's ``tasks.SCHEDULE``: a new app's periodic work needs no list here."""
    from django.apps import apps

    found: dict[str, tuple[float, str]] = {}
    for config in apps.get_app_configs():
        if importlib.util.find_spec(f"{config.name}.tasks") is not None:
            found.update(getattr(importlib.import_module(f"{config.name}.tasks"), "SCHEDULE", {}))
    return found


def beat_schedule() -> dict:
    return {name: {"task": path, "schedule": seconds} for name, (seconds, path) in entries().items()}


def _resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


# --- the lease: one holder per deployment ------------------------------------------------


class RedisLease:
    """A key that expires unless its holder renews it: one holder across machines."""

    def __init__(self, url: str, name: str = LEASE_NAME, seconds: int = LEASE_S):
        import redis
        from django.conf import settings

        self.client = redis.Redis.from_url(url, **settings.REDIS_CLIENT)
        self.lock = self.client.lock(name, timeout=seconds, thread_local=False)
        self.lock.local.token = uuid.uuid4().hex.encode()

    def hold(self) -> bool:
        """Take or renew the lease; False while another scheduler holds it."""
        import redis.exceptions

        try:
            if self.lock.owned():
                self.lock.reacquire()
                return True
            return self.lock.acquire(blocking=False, token=self.lock.local.token)
        except (redis.exceptions.RedisError, OSError) as exc:
            logger.warning("scheduler lease: Redis is unreachable (%s); standing by", exc)
            return False

    def release(self) -> None:
        try:
            if self.lock.owned():
                self.lock.release()
        except Exception:  # it expires by itself
            pass


class FileLease:
    """An exclusive lock on a file next to the SQLite database: every process that
    shares that database is on this machine. The kernel drops it when the holder dies."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def hold(self) -> bool:
        if self.fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class PostgresLease:
    """A session advisory lock on a connection of its own (not Django's, which tasks
    close): PostgreSQL drops it when that connection ends, holder dead or not."""

    KEY = 0x6770_7563_6F6E  # any fixed 64-bit number; "gpucon"

    def __init__(self, params: dict):
        self.params = params
        self.conn = None

    def hold(self) -> bool:
        import psycopg

        try:
            if self.conn is not None:
                self.conn.execute("SELECT 1")  # still ours while the connection lives
                return True
            conn = psycopg.connect(**self.params, autocommit=True, connect_timeout=5)
            if conn.execute("SELECT pg_try_advisory_lock(%s)", [self.KEY]).fetchone()[0]:
                self.conn = conn
                return True
            conn.close()
        except psycopg.Error as exc:
            logger.warning("scheduler lease: PostgreSQL is unreachable (%s); standing by", exc)
            self.release()
        return False

    def release(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            finally:
                self.conn = None


def lease():
    """The scheduler lease of this deployment: in Redis when there is one, else in the
    database all processes share."""
    from django.conf import settings
    from django.db import connection

    if settings.REDIS_URL:
        return RedisLease(settings.REDIS_URL)
    if connection.vendor == "postgresql":
        params = connection.get_connection_params()
        for django_only in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(django_only, None)
        return PostgresLease(params)
    return FileLease(Path(f"{settings.DATABASES['default']['NAME']}.scheduler.lock"))


# --- the two schedulers --------------------------------------------------------------------


class InProcessScheduler(threading.Thread):
    """Runs every scheduled task at its period, one after another, until stopped,
    while this process holds the lease."""

    def __init__(self, tick: float = 1.0, held=None):
        super().__init__(name="schedule", daemon=True)
        self.tick = tick
        self.held = held
        self.stopping = threading.Event()

    def run(self) -> None:
        from django.db import close_old_connections

        self.held = self.held or lease()
        due: dict[str, float] = {}
        while not self.stopping.is_set():
            if not self.held.hold():
                due = {}  # a later holder starts with every task due
                self.stopping.wait(STANDBY_TICK_S)
                continue
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
                if not self.held.hold():  # a long task outlived the lease: stop here
                    break
            self.stopping.wait(self.tick)
        self.held.release()

    def stop(self) -> None:
        self.stopping.set()


class LeasedBeatScheduler(Scheduler):
    """Celery beat that sends tasks only while it holds the lease (settings:
    ``CELERY_BEAT_SCHEDULER``); a second beat waits and takes over if the first dies."""

    def __init__(self, *args, **kwargs):
        self.held = None
        super().__init__(*args, **kwargs)

    def tick(self, *args, **kwargs):
        if self.held is None:
            self.held = lease()
        if not self.held.hold():
            return STANDBY_TICK_S
        return min(super().tick(*args, **kwargs), LEASE_S / 3)

    def close(self):
        if self.held is not None:
            self.held.release()
        super().close()
