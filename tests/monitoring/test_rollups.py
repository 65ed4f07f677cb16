"""Rollups equal the aggregates of the raw samples, are idempotent, and catch up."""

from datetime import timedelta

import pytest
from telemetry_wire import add_samples, utc

from monitoring import rollups
from monitoring.models import Rollup1h, Rollup1m, RollupCursor

START = utc(2026, 12, 1, 10, 0, 0)


@pytest.fixture
def gpu(fleet):
    return fleet["hosts"]["h100-a"].gpus.first()


@pytest.fixture
def two_hours(gpu):
    """One sample a second for two hours; GPM every 5th; an energy counter."""
    values = []
    for i in range(7200):
        m = {"gpu_util": (i * 7) % 101, "power_mw": 100_000 + (i % 600) * 1000, "temp_c": 40 + i % 30,
             "energy_mj": 5_000_000 + i * 400_000}
        if i % 5 == 0:
            m["tensor_active_pct"] = float(i % 50)
        values.append(m)
    add_samples(gpu, START, values)
    return values


def test_a_minute_holds_min_avg_max_of_its_samples(two_hours):
    rollups.build_1m(START, START + timedelta(minutes=2))
    second = Rollup1m.objects.get(bucket=START + timedelta(minutes=1))
    raw = two_hours[60:120]
    util = [v["gpu_util"] for v in raw]
    tensor = [v["tensor_active_pct"] for v in raw if "tensor_active_pct" in v]
    assert (second.gpu_util_min, second.gpu_util_max) == (min(util), max(util))
    assert second.gpu_util_avg == pytest.approx(sum(util) / 60)
    assert second.tensor_active_pct_avg == pytest.approx(sum(tensor) / len(tensor))
    assert (second.samples, second.observed_s) == (60, 60)


def test_energy_is_the_counters_increase(two_hours):
    rollups.build_1m(START, START + timedelta(minutes=3))
    minutes = list(Rollup1m.objects.order_by("bucket"))
    assert minutes[0].energy_mj_delta == 59 * 400_000  # the first minute has nothing before it
    assert minutes[1].energy_mj_delta == minutes[2].energy_mj_delta == 60 * 400_000


def test_an_hour_is_exact_from_raw(two_hours):
    rollups.build_1m(START, START + timedelta(hours=2))
    rollups.build_1h(START, START + timedelta(hours=2))
    hour = Rollup1h.objects.get(bucket=START + timedelta(hours=1))
    power = [v["power_mw"] for v in two_hours[3600:]]
    assert hour.power_mw_avg == pytest.approx(sum(power) / 3600)
    assert (hour.power_mw_min, hour.power_mw_max) == (min(power), max(power))
    assert hour.samples == 3600 and hour.observed_s == pytest.approx(3600)
    assert hour.energy_mj_delta == 3600 * 400_000


def test_building_twice_changes_nothing(two_hours):
    rollups.build_1m(START, START + timedelta(minutes=10))
    first = list(Rollup1m.objects.order_by("bucket").values("bucket", "gpu_util_avg", "energy_mj_delta"))
    rollups.build_1m(START, START + timedelta(minutes=10))
    assert list(Rollup1m.objects.order_by("bucket").values("bucket", "gpu_util_avg", "energy_mj_delta")) == first


def test_runs_catch_up_in_bounded_steps(two_hours):
    now = START + timedelta(hours=2, minutes=1)
    assert rollups.run("1m", now=now, max_buckets=50) == 50
    assert rollups.run("1m", now=now, max_buckets=100) == 70
    assert rollups.run("1m", now=now) == 0
    assert Rollup1m.objects.count() == 120
    assert rollups.run("1h", now=now) == 2
    assert Rollup1h.objects.count() == 2


def test_a_bucket_is_built_only_once_it_is_over(gpu):
    add_samples(gpu, START, [{"gpu_util": 1}] * 30)
    assert rollups.run("1m", now=START + timedelta(seconds=50)) == 0
    assert rollups.run("1m", now=START + timedelta(seconds=95)) == 1


def test_late_samples_rebuild_their_bucket(agent_ingest, gpu):
    add_samples(gpu, START, [{"gpu_util": 10}] * 60)
    rollups.run("1m", now=START + timedelta(minutes=5))
    agent_ingest(gpu, START + timedelta(seconds=30.5), gpu_util=100)
    assert RollupCursor.objects.get(name="1m").dirty_from is not None
    rollups.run("1m", now=START + timedelta(minutes=5))
    assert Rollup1m.objects.get(bucket=START).gpu_util_max == 100
