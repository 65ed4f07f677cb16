"""Idle and observed seconds are summed by the database (whole buckets) and here (the
buckets cut by the range): on a random history of minute and hour rollups (gaps, hours
with and without minutes, metrics missing, values at the threshold) they equal a
rollup-by-rollup reading of the rules in monitoring/activity.py."""

import random
from datetime import timedelta

import pytest
from telemetry_wire import utc

from monitoring.activity import (
    BUCKET,
    HOUR,
    activity_by_gpu,
    activity_by_instance,
    activity_by_instance_and_day,
    real_activity,
)
from monitoring.models import Rollup1h, Rollup1m

T0 = utc(2026, 11, 10, 0, 0)


def one_by_one(instance_ids, start, end, threshold):
    """The rules, one rollup at a time: every minute rollup inside the range (in part
    where cut), and each hour rollup whose device-hour has no minute rollup there; a
    rollup with no reading of activity is not observed."""
    covered, totals = set(), {}
    for tier, width in ((Rollup1m, BUCKET), (Rollup1h, HOUR)):
        for row in tier.objects.filter(instance_id__in=instance_ids, bucket__gt=start - width, bucket__lt=end):
            key = (row.instance_id, row.gpu_id, row.slice_id, row.bucket.replace(minute=0))
            if tier is Rollup1m:
                covered.add(key)
            elif key in covered:
                continue
            activity = real_activity(row.gpu_util_avg, row.sm_occupancy_pct_avg, row.tensor_active_pct_avg,
                                     row.dram_bw_util_pct_avg)
            if activity is None:  # no reading of activity: not observed
                continue
            seconds = row.observed_s * ((min(end, row.bucket + width) - max(start, row.bucket)) / width)
            entry = totals.setdefault((row.instance_id, row.gpu.uuid), [0.0, 0.0])
            entry[0] += seconds
            entry[1] += seconds if activity is not None and activity < threshold else 0.0
    return {key: (round(o), round(i)) for key, (o, i) in totals.items()}


def maybe(rng, value):
    return None if rng.random() < 0.3 else value


@pytest.fixture
def history(acme_instance):
    rng = random.Random(7)
    gpus = list(acme_instance.gpus.order_by("index"))
    for gpu in gpus:
        for h in range(30):  # hours; minute rollups only in the last 8, with gaps
            at = T0 + timedelta(hours=h)
            metrics = dict(gpu_util_avg=rng.choice([None, 0.0, 5.0, 10.0, 40.0, 99.0]),
                           sm_occupancy_pct_avg=maybe(rng, rng.choice([0.0, 9.9, 10.0, 70.0])),
                           tensor_active_pct_avg=maybe(rng, rng.uniform(0, 20)), dram_bw_util_pct_avg=maybe(rng, 3.0))
            if rng.random() < 0.9:
                Rollup1h.objects.create(bucket=at, gpu=gpu, instance=acme_instance, team=acme_instance.team,
                                        samples=3600, observed_s=rng.uniform(1800, 3600), **metrics)
            if h < 22:
                continue
            for m in range(60):
                if rng.random() < 0.15:
                    continue
                Rollup1m.objects.create(
                    bucket=at + timedelta(minutes=m), gpu=gpu, instance=acme_instance, team=acme_instance.team,
                    samples=60, observed_s=rng.choice([60.0, 59.5, 30.0]),
                    gpu_util_avg=rng.choice([None, 2.0, 10.0, 60.0]),
                    sm_occupancy_pct_avg=maybe(rng, rng.uniform(0, 25)), tensor_active_pct_avg=maybe(rng, 0.0),
                    dram_bw_util_pct_avg=maybe(rng, rng.uniform(0, 15)))
    return acme_instance


@pytest.mark.parametrize("start, end", [
    (T0, T0 + timedelta(hours=30)),
    (T0 + timedelta(minutes=17, seconds=20), T0 + timedelta(hours=25, minutes=3, seconds=40)),
    (T0 + timedelta(hours=23, minutes=5, seconds=30), T0 + timedelta(hours=23, minutes=5, seconds=50)),
    (T0 + timedelta(hours=21, minutes=30), T0 + timedelta(hours=22, minutes=30, seconds=1)),
    (T0 - timedelta(days=1), T0 + timedelta(days=3)),
])
@pytest.mark.parametrize("threshold", [10.0, 1.0])
def test_database_sums_equal_the_rules_one_rollup_at_a_time(history, start, end, threshold):
    expected = one_by_one([history.pk], start, end, threshold)
    assert activity_by_gpu([history.pk], start, end, threshold_pct=threshold) == expected
    observed = sum(o for o, _ in expected.values())
    idle = sum(i for _, i in expected.values())
    got = activity_by_instance([history.pk], start, end, threshold_pct=threshold)[history.pk]
    assert abs(got[0] - observed) <= 1 and abs(got[1] - idle) <= 1  # per instance, rounded once, not per GPU
    assert observed > 0


@pytest.mark.parametrize("start, end", [
    (T0 - timedelta(days=1), T0 + timedelta(days=3)),
    (T0 + timedelta(hours=5, minutes=17, seconds=20), T0 + timedelta(hours=25, minutes=3, seconds=40)),
    (T0 + timedelta(hours=23, minutes=5, seconds=30), T0 + timedelta(hours=23, minutes=5, seconds=50)),
])
def test_by_day_in_one_pass_equals_each_days_own_reading(history, start, end):
    got = activity_by_instance_and_day([history.pk], start, end)
    expected = {}
    day = start.replace(hour=0, minute=0, second=0)
    while day < end:
        observed, idle = activity_by_instance([history.pk], max(start, day), min(end, day + timedelta(days=1)))[history.pk]
        if observed:
            expected[(day, history.pk)] = (observed, idle)
        day += timedelta(days=1)
    assert got == expected and len(expected) >= (2 if end - start > timedelta(hours=2) else 1)
