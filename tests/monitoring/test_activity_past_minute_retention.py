"""Past the 1-minute rollups' retention, idle cost reads a device-hour from its 1-hour
rollup (judged by the hour's average); where minute rollups exist they alone count."""

from datetime import timedelta

import pytest
from telemetry_wire import utc

from monitoring.activity import activity_by_gpu, activity_by_instance
from monitoring.models import Rollup1h, Rollup1m

HOUR = utc(2026, 11, 10, 9, 0)


def rollup(model, instance, gpu, at, observed, **avg):
    fields = {f"{k}_avg": v for k, v in avg.items()}
    return model.objects.create(bucket=at, gpu=gpu, instance=instance, team=instance.team, samples=int(observed),
                                observed_s=observed, **fields)


@pytest.fixture
def gpus(acme_instance):
    return list(acme_instance.gpus.order_by("index"))


def test_an_hour_without_minutes_counts_from_its_hourly_rollup(acme_instance, gpus):
    rollup(Rollup1h, acme_instance, gpus[0], HOUR, 3600, gpu_util=4)
    rollup(Rollup1h, acme_instance, gpus[1], HOUR, 1800, gpu_util=90)
    result = activity_by_instance([acme_instance.pk], HOUR, HOUR + timedelta(hours=1))
    assert result == {acme_instance.pk: (5400, 3600)}
    assert activity_by_gpu([acme_instance.pk], HOUR, HOUR + timedelta(hours=1))[(acme_instance.pk, gpus[0].uuid)] == (
        3600, 3600)


def test_an_hour_with_minutes_is_not_counted_twice(acme_instance, gpus):
    rollup(Rollup1h, acme_instance, gpus[0], HOUR, 3600, gpu_util=4)
    rollup(Rollup1m, acme_instance, gpus[0], HOUR + timedelta(minutes=5), 60, gpu_util=95)
    result = activity_by_instance([acme_instance.pk], HOUR, HOUR + timedelta(hours=1))
    assert result == {acme_instance.pk: (60, 0)}


def test_an_hourly_rollup_cut_by_the_range_counts_in_part(acme_instance, gpus):
    rollup(Rollup1h, acme_instance, gpus[0], HOUR, 3600, gpu_util=4)
    result = activity_by_instance([acme_instance.pk], HOUR + timedelta(minutes=45), HOUR + timedelta(hours=2))
    assert result == {acme_instance.pk: (900, 900)}
