"""Raw samples leave after RAW_RETENTION_HOURS, but never before they are rolled up;
rollups and events leave after theirs."""

from datetime import timedelta

import pytest
from django.db import connection
from telemetry_wire import add_samples, utc

from monitoring import rollups
from monitoring.models import GpuEvent, Rollup1h, Rollup1m, Sample

NOW = utc(2026, 12, 2, 12, 0, 0)

# PostgreSQL drops whole day partitions instead (tests/monitoring/test_partitions.py).
deletes_rows = pytest.mark.skipif(connection.vendor == "postgresql", reason="row deletion is SQLite's retention")


@pytest.fixture
def gpu(fleet):
    return fleet["hosts"]["h100-a"].gpus.first()


@pytest.fixture
def three_days(gpu):
    """One sample every 10 minutes for the last 72 hours."""
    add_samples(gpu, NOW - timedelta(hours=72), [{"gpu_util": 1}] * 432, step=timedelta(minutes=10))


def roll_up_to(now):
    while rollups.run("1m", now=now, max_buckets=5000) or rollups.run("1h", now=now):
        pass


@deletes_rows
def test_raw_samples_older_than_retention_go(three_days, settings):
    settings.RAW_RETENTION_HOURS = 24
    roll_up_to(NOW)
    rollups.expire(now=NOW, max_hours=1000)
    assert Sample.objects.order_by("time").first().time == NOW - timedelta(hours=24)
    assert Sample.objects.count() == 144


def test_raw_samples_stay_until_rolled_up(three_days, settings):
    settings.RAW_RETENTION_HOURS = 24
    rollups.expire(now=NOW, max_hours=1000)
    assert Sample.objects.count() == 432


@deletes_rows
def test_each_run_deletes_a_bounded_slice(three_days, settings):
    settings.RAW_RETENTION_HOURS = 24
    roll_up_to(NOW)
    assert rollups.expire(now=NOW, max_hours=2)["raw"] == 12
    assert rollups.expire(now=NOW, max_hours=2)["raw"] == 12


def test_rollups_and_events_expire_on_their_own_clocks(gpu, settings):
    settings.ROLLUP_1M_RETENTION_DAYS = 7
    settings.ROLLUP_1H_RETENTION_DAYS = 30
    for days in (1, 10, 40):
        Rollup1m.objects.create(gpu=gpu, bucket=NOW - timedelta(days=days))
        Rollup1h.objects.create(gpu=gpu, bucket=NOW - timedelta(days=days))
        GpuEvent.objects.create(gpu=gpu, host=gpu.host, uuid=gpu.uuid, kind="xid", time=NOW - timedelta(days=days * 3))
    removed = rollups.expire(now=NOW)
    assert (removed["1h"], removed["events"]) == (1, 1)
    if connection.vendor != "postgresql":
        assert removed["1m"] == 2
    assert Rollup1m.objects.count() == 1 and Rollup1h.objects.count() == 2 and GpuEvent.objects.count() == 2
