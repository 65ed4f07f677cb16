"""Each 1-hour rollup carries the idle seconds of its minutes, so idle cost over whole
hours reads hours: the same figures as reading every minute, kept once the minutes are
past retention, and read from minutes again wherever an hour waits for a rebuild."""

from datetime import timedelta

import pytest
from django.db.models import F
from telemetry_wire import add_samples, utc

from monitoring import rollup_marks, rollups
from monitoring.activity import (
    IDLE_BELOW_PCT,
    activity_by_gpu,
    activity_by_instance,
    activity_by_instance_and_day,
    exact_hours,
    real_activity,
)
from monitoring.models import Rollup1h, Rollup1m, RollupCursor, Sample

START = utc(2026, 11, 10, 22, 0)  # five hours across midnight
HOURS = 5
STEP = timedelta(seconds=10)


def minute_of(gpu_index: int, minute: int) -> dict | None:
    """Runs of idle and busy minutes; GPU 0 reports SM occupancy (GPM), GPU 1 only
    utilization, goes quiet for half an hour and for a quarter reports its memory alone."""
    if gpu_index == 0:
        util = 0.0 if (minute // 7) % 2 == 0 else 60.0
        return {"gpu_util": util, "sm_occupancy_pct": util / 2}
    if 100 <= minute < 130:
        return None
    if 200 <= minute < 215:
        return {"mem_used": 2**30}
    return {"gpu_util": 5.0 if (minute // 13) % 3 == 0 else 80.0}


def write(instance, gpus, minutes: range) -> None:
    for index, gpu in enumerate(gpus):
        for minute in minutes:
            values = minute_of(index, minute)
            if values is not None:
                add_samples(gpu, START + timedelta(minutes=minute), [values] * 6, step=STEP, instance=instance)


def roll_up(now):
    while rollups.run("1m", now=now, max_buckets=10_000):
        pass
    while rollups.run("1h", now=now, max_buckets=10_000):
        pass


@pytest.fixture
def gpus(acme_instance):
    return list(acme_instance.gpus.order_by("index"))


@pytest.fixture
def history(acme_instance, gpus):
    write(acme_instance, gpus, range(HOURS * 60))
    roll_up(START + timedelta(hours=HOURS, minutes=1))
    return acme_instance


def from_minutes(read, *args):
    """``read`` as it answers with no hour carrying idle seconds."""
    cursor = RollupCursor.objects.get(name="1h")
    kept, cursor.idle_from = cursor.idle_from, None
    cursor.save()
    try:
        return read(*args)
    finally:
        cursor.idle_from = kept
        cursor.save()


RANGES = [
    (START, START + timedelta(hours=HOURS)),
    (START + timedelta(minutes=17, seconds=30), START + timedelta(hours=3, minutes=41)),
    (START + timedelta(hours=1, minutes=5), START + timedelta(hours=1, minutes=50)),  # no whole hour
    (START - timedelta(days=1), START + timedelta(days=1)),
]


def test_an_hour_holds_the_idle_seconds_of_its_minutes(history):
    hours = list(Rollup1h.objects.all())
    assert len(hours) == 2 * HOURS
    for hour in hours:
        minutes = Rollup1m.objects.filter(gpu_id=hour.gpu_id, bucket__gte=hour.bucket,
                                          bucket__lt=hour.bucket + timedelta(hours=1))
        judged = [m for m in minutes if real_activity(m.gpu_util_avg, m.sm_occupancy_pct_avg) is not None]
        idle = sum(m.observed_s for m in judged if real_activity(m.gpu_util_avg, m.sm_occupancy_pct_avg) < IDLE_BELOW_PCT)
        assert hour.judged_s == pytest.approx(sum(m.observed_s for m in judged))
        assert hour.idle_s == pytest.approx(idle)
        assert 0 < hour.idle_s < hour.judged_s  # each hour has idle and busy minutes
    assert Rollup1h.objects.filter(judged_s__lt=F("observed_s") - 60).count() == 1  # the memory-only quarter


@pytest.mark.parametrize("start,end", RANGES)
def test_reading_hours_equals_reading_minutes(history, start, end):
    ids = [history.pk]
    if end - start >= timedelta(hours=2):
        assert exact_hours(start, end) is not None
    for read in (activity_by_instance, activity_by_gpu, activity_by_instance_and_day):
        assert read(ids, start, end) == from_minutes(read, ids, start, end)
    assert activity_by_instance(ids, start, end)[history.pk][1] > 0


def test_idle_seconds_stay_once_the_minutes_are_gone(history):
    ids, end = [history.pk], START + timedelta(hours=HOURS)
    before = activity_by_gpu(ids, START, end)
    Rollup1m.objects.all().delete()
    assert activity_by_gpu(ids, START, end) == before
    assert from_minutes(activity_by_gpu, ids, START, end) == before  # hours waiting for a rebuild too
    # Judged by each hour's average instead (hours built before they stored their
    # minutes' sums), every hour would read busy.
    Rollup1h.objects.update(judged_s=None, idle_s=None)
    assert activity_by_instance(ids, START, end)[history.pk][1] == 0


def test_a_new_holders_late_hour_is_added_beside_the_old_holders(acme_instance, globex_instance, gpus):
    """Past raw retention, an hour already built for one holder still takes the rows of
    another holder of the device whose readings come days late."""
    write(acme_instance, gpus[:1], range(30))
    roll_up(START + timedelta(hours=1, minutes=1))
    write(globex_instance, gpus[:1], range(30, 60))  # the next holder's spool, days later
    rollup_marks.note_late(START.timestamp() + 1800)
    roll_up(START + timedelta(days=4))
    hour = (START, START + timedelta(hours=1))
    for instance in (acme_instance, globex_instance):
        row = Rollup1h.objects.get(bucket=START, gpu=gpus[0], instance=instance)
        assert row.observed_s == pytest.approx(1800)
        ids = [instance.pk]
        assert activity_by_gpu(ids, *hour) == from_minutes(activity_by_gpu, ids, *hour)


def test_a_sample_late_past_minute_retention_leaves_its_hour_whole(acme_instance, gpus):
    write(acme_instance, gpus[:1], range(60))
    roll_up(START + timedelta(hours=1, minutes=1))
    built = Rollup1h.objects.get(bucket=START)
    Rollup1m.objects.all().delete()  # past their 30 days
    add_samples(gpus[0], START + timedelta(minutes=20, seconds=5), [{"gpu_util": 99.0}] * 2, instance=acme_instance)
    rollup_marks.note_late(START.timestamp() + 1205)
    roll_up(START + timedelta(days=40))
    row = Rollup1h.objects.get(bucket=START)
    assert (row.observed_s, row.judged_s, row.idle_s) == (built.observed_s, built.judged_s, built.idle_s)


def test_hours_waiting_for_a_rebuild_are_read_from_minutes(history, gpus):
    ids, end = [history.pk], START + timedelta(hours=HOURS)
    late = START + timedelta(hours=2, minutes=10)
    # A spool replayed late: the GPU reports a busy burst in minutes it had idle.
    add_samples(gpus[0], late, [{"gpu_util": 90.0, "sm_occupancy_pct": 90.0}] * 60, instance=history)
    rollup_marks.note_late(late.timestamp())
    assert exact_hours(START, end) == (START, START + timedelta(hours=2))
    now = START + timedelta(hours=HOURS, minutes=1)
    rollups.run("1m", now=now, max_buckets=10_000)
    assert exact_hours(START, end)[1] <= late  # minutes rebuilt, hours not yet
    after_minutes = activity_by_gpu(ids, START, end)
    assert after_minutes == from_minutes(activity_by_gpu, ids, START, end)
    roll_up(now)
    assert exact_hours(START, end) == (START, end)
    assert activity_by_gpu(ids, START, end) == after_minutes


def test_a_late_half_hour_past_raw_retention_updates_its_hour(acme_instance, gpus):
    ids, hour = [acme_instance.pk], (START, START + timedelta(hours=1))
    write(acme_instance, gpus[:1], range(30))
    roll_up(START + timedelta(hours=1, minutes=1))
    write(acme_instance, gpus[:1], range(30, 60))  # delivered days later
    rollup_marks.note_late(START.timestamp() + 1800)
    roll_up(START + timedelta(days=4))
    row = Rollup1h.objects.get(bucket=START, gpu=gpus[0])
    assert row.observed_s == pytest.approx(3600)
    assert activity_by_gpu(ids, *hour) == from_minutes(activity_by_gpu, ids, *hour)
    assert exact_hours(*hour) == hour


def test_an_hour_is_built_from_minutes_whose_samples_are_gone(acme_instance, gpus):
    write(acme_instance, gpus[:1], range(60))
    rollups.build_1m(START, START + timedelta(hours=1))
    Sample.objects.all().delete()
    rollups.build_1h(START, START + timedelta(hours=1))
    row = Rollup1h.objects.get(bucket=START, gpu=gpus[0])
    minutes = Rollup1m.objects.filter(gpu=gpus[0])
    assert row.samples == 360 and row.observed_s == pytest.approx(sum(m.observed_s for m in minutes))
    assert row.gpu_util_min == 0.0 and row.gpu_util_max == 60.0
    assert row.idle_s == pytest.approx(sum(m.observed_s for m in minutes if m.gpu_util_avg < 20))


def test_a_device_reporting_no_activity_is_not_observed(acme_instance, gpus):
    """An A100's MIG slice reports its memory and nothing of its activity: its idle
    share is unknown, not zero, read from minutes or from hours alike."""
    add_samples(gpus[0], START, [{"mem_used": 2**30}] * 720, step=STEP, instance=acme_instance)
    roll_up(START + timedelta(hours=2, minutes=1))
    ids, span = [acme_instance.pk], (START, START + timedelta(hours=2))
    assert Rollup1h.objects.get(bucket=START).observed_s == pytest.approx(3600)
    assert activity_by_instance(ids, *span) == from_minutes(activity_by_instance, ids, *span) == {acme_instance.pk: (0, 0)}
