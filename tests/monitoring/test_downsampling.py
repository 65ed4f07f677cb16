"""Downsampling keeps each bucket's true minimum and maximum and at most the asked
number of points."""

import random
from datetime import timedelta

import pytest
from telemetry_wire import add_samples, utc

from monitoring.models import Sample
from monitoring.queries import MAX_POINTS, bucket_rows, parse_window, to_series

START = utc(2026, 12, 1, 0, 0, 0)


@pytest.fixture
def spiky(fleet):
    gpu = fleet["hosts"]["h100-a"].gpus.first()
    rng = random.Random(7)
    values = [{"gpu_util": rng.uniform(20, 30)} for _ in range(2000)]
    values[1234] = {"gpu_util": 100.0}
    values[1987] = {"gpu_util": 0.0}
    add_samples(gpu, START, values)
    return gpu, [v["gpu_util"] for v in values]


def series(points, start=START, seconds=2000):
    window = parse_window({"metric": "gpu_util", "start": start.isoformat(),
                           "end": (start + timedelta(seconds=seconds)).isoformat(), "points": str(points)})
    _, rows = bucket_rows(Sample.objects.all(), window)
    return to_series(rows, window.metrics)["gpu_util"]


def test_it_returns_at_most_the_points_asked(spiky):
    assert len(series(200)["t"]) == 200
    assert len(series(MAX_POINTS)["t"]) <= MAX_POINTS


def test_each_bucket_keeps_its_min_and_max(spiky):
    _, values = spiky
    out = series(200)
    for i in range(200):
        bucket = values[i * 10:(i + 1) * 10]
        assert out["min"][i] == min(bucket)
        assert out["max"][i] == max(bucket)
        assert out["avg"][i] == pytest.approx(sum(bucket) / len(bucket), abs=1e-3)


def test_a_single_spike_survives_any_zoom(spiky):
    for points in (1, 7, 100, 2000):
        out = series(points)
        assert max(out["max"]) == 100.0
        assert min(out["min"]) == 0.0
