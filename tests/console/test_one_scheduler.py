"""Periodic work runs in one scheduler per deployment, whatever the number of server
processes or beats: the holder of the scheduler lease; another takes over when it stops."""

import threading
import time

import pytest
from django.conf import settings
from django.db import connection

from gpuconsole import schedule
from gpuconsole.celery import app as celery_app


@pytest.fixture
def counted(monkeypatch):
    runs = []
    monkeypatch.setattr(schedule, "STANDBY_TICK_S", 0.05)
    monkeypatch.setattr(schedule, "entries", lambda: {"count": (3600, "count")})
    monkeypatch.setattr(schedule, "_resolve", lambda path: lambda: runs.append(threading.current_thread().name))
    return runs


def wait_for(check, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    return check()


def test_two_in_process_schedulers_run_the_work_once(counted, tmp_path):
    first = schedule.InProcessScheduler(tick=0.05, held=schedule.FileLease(tmp_path / "lock"))
    second = schedule.InProcessScheduler(tick=0.05, held=schedule.FileLease(tmp_path / "lock"))
    first.start()
    assert wait_for(lambda: len(counted) == 1)
    second.start()
    time.sleep(0.5)
    assert len(counted) == 1
    first.stop()
    first.join()
    assert wait_for(lambda: len(counted) == 2)  # the standby took over and ran it
    second.stop()
    second.join()


def test_a_file_lease_has_one_holder(tmp_path):
    a, b = schedule.FileLease(tmp_path / "lock"), schedule.FileLease(tmp_path / "lock")
    assert (a.hold(), b.hold(), a.hold()) == (True, False, True)
    a.release()
    assert b.hold()
    b.release()


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real Redis)")
def test_a_redis_lease_has_one_holder_and_expires():
    name = f"test:scheduler:{time.monotonic_ns()}"
    a, b = schedule.RedisLease(settings.REDIS_URL, name, seconds=1), schedule.RedisLease(settings.REDIS_URL, name, seconds=1)
    assert (a.hold(), b.hold(), a.hold()) == (True, False, True)
    time.sleep(1.2)  # a stopped renewing: its lease lapsed
    assert (b.hold(), a.hold()) == (True, False)
    b.release()


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL")
def test_a_postgres_lease_has_one_holder():
    a, b = schedule.lease(), schedule.lease()
    if settings.REDIS_URL:
        params = connection.get_connection_params()
        for key in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(key, None)
        a, b = schedule.PostgresLease(params), schedule.PostgresLease(params)
    assert (a.hold(), b.hold(), a.hold()) == (True, False, True)
    a.release()
    assert b.hold()
    b.release()


def test_the_deployment_picks_its_lease():
    expected = (
        schedule.RedisLease if settings.REDIS_URL
        else schedule.PostgresLease if connection.vendor == "postgresql" else schedule.FileLease
    )
    assert isinstance(schedule.lease(), expected)
    assert settings.CELERY_BEAT_SCHEDULER == "gpuconsole.schedule:LeasedBeatScheduler"


class RecordingBeat(schedule.LeasedBeatScheduler):
    def __init__(self, *args, **kwargs):
        self.sent = []
        super().__init__(*args, **kwargs)

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        self.sent.append(entry.name)  # instead of sending it to the broker


def beat(tmp_path):
    found = RecordingBeat(app=celery_app, lazy=True)
    found.held = schedule.FileLease(tmp_path / "lock")
    found.merge_inplace({"often": {"task": "monitoring.tasks.publish_stale", "schedule": 0.01}})
    return found


def test_a_second_beat_stands_by_until_the_first_stops(tmp_path):
    first, second = beat(tmp_path), beat(tmp_path)
    time.sleep(0.05)
    first.tick()
    assert second.tick() == schedule.STANDBY_TICK_S
    assert (first.sent, second.sent) == (["often"], [])
    first.close()
    time.sleep(0.05)
    second.tick()
    assert second.sent == ["often"]
    second.close()
