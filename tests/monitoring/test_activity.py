"""activity_by_instance: observed and idle GPU-seconds from the 1-minute rollups, where
idle means little real work (GPM where reported, else utilization)."""

from datetime import timedelta

import pytest
from telemetry_wire import utc

from monitoring.activity import activity_by_instance, instance_latest, real_activity
from monitoring.models import GpuLatest, Rollup1m

START = utc(2026, 12, 1, 0, 0)


def minute(instance, gpu, at, **avg):
    fields = {f"{k}_avg": v for k, v in avg.items()}
    return Rollup1m.objects.create(bucket=at, gpu=gpu, instance=instance, team=instance.team, samples=60,
                                   observed_s=60, **fields)


@pytest.fixture
def history(acme_instance):
    gpu, other = acme_instance.gpus.order_by("index")
    minute(acme_instance, gpu, START, gpu_util=100, tensor_active_pct=0, sm_occupancy_pct=80, dram_bw_util_pct=88)  # copy
    minute(acme_instance, gpu, START + timedelta(minutes=1), gpu_util=2, tensor_active_pct=0, sm_occupancy_pct=0)  # held
    minute(acme_instance, gpu, START + timedelta(minutes=2), gpu_util=95)  # no GPM: utilization decides
    minute(acme_instance, other, START, gpu_util=3)
    return acme_instance


def test_it_counts_observed_and_idle_gpu_seconds(history):
    result = activity_by_instance([history.pk], START, START + timedelta(minutes=3))
    assert result == {history.pk: (240, 120)}


def test_a_memory_copy_is_real_work():
    assert real_activity(100, 80.0, 0.0, 88.0) == 88.0
    assert real_activity(2, 0.0, 0.0, 0.0) == 0.0
    assert real_activity(40) == 40
    assert real_activity(None) is None


def test_minutes_cut_by_the_range_count_in_part(history):
    result = activity_by_instance([history.pk], START + timedelta(seconds=30), START + timedelta(minutes=1, seconds=30))
    assert result == {history.pk: (90, 60)}


def test_the_threshold_is_a_parameter(history):
    assert activity_by_instance([history.pk], START, START + timedelta(minutes=3), threshold_pct=1.0)[history.pk] == (240, 60)


def test_unknown_instances_answer_zero(history):
    assert activity_by_instance([987654], START, START + timedelta(hours=1)) == {987654: (0, 0)}


def test_instance_latest_lists_its_gpus(acme_instance):
    gpu = acme_instance.gpus.order_by("index").first()
    GpuLatest.objects.create(uuid=gpu.uuid, gpu=gpu, host=gpu.host, instance=acme_instance, time=START,
                             last_seen=START, metrics={"gpu_util": 7})
    entry = instance_latest([acme_instance.pk])[acme_instance.pk]
    assert entry["gpus"] == [{"uuid": gpu.uuid, "host": gpu.host.name, "index": gpu.index, "instance": acme_instance.pk,
                              "team": None, "t": START.isoformat(), "m": {"gpu_util": 7}, "stale": True}]
