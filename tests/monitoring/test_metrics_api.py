"""GET /api/v1/gpus/{uuid}/metrics/ and /api/v1/instances/{id}/metrics/."""

from datetime import timedelta

import pytest
from telemetry_wire import add_samples, utc

START = utc(2026, 12, 1, 12, 0, 0)


@pytest.fixture
def gpu(acme_instance):
    gpu = acme_instance.gpus.order_by("index").first()
    add_samples(gpu, START, [{"gpu_util": v, "power_mw": 100_000 + v} for v in (10, 20, 30, 40)],
                instance=acme_instance)
    return gpu


def get(api, user, path, **params):
    return api(user).get(path, params)


def test_it_returns_each_series(api, bob, gpu):
    body = get(api, bob, f"/api/v1/gpus/{gpu.uuid}/metrics/", metric=["gpu_util", "power_mw"],
               start="2026-12-01T12:00:00Z", end="2026-12-01T12:01:00Z").json()
    assert (body["gpu"], body["tier"]) == (gpu.uuid, "raw")
    assert (body["start"], body["end"]) == ("2026-12-01T12:00:00Z", "2026-12-01T12:01:00Z")
    util = body["series"]["gpu_util"]
    assert util["avg"] == util["min"] == util["max"] == [10, 20, 30, 40]
    assert util["t"][0] == "2026-12-01T12:00:00Z"
    assert body["series"]["power_mw"]["max"] == [100_010, 100_020, 100_030, 100_040]


def test_it_takes_unix_seconds(api, bob, gpu):
    start = START.timestamp()
    body = get(api, bob, f"/api/v1/gpus/{gpu.uuid}/metrics/", start=str(start), end=str(start + 2)).json()
    assert body["series"]["gpu_util"]["avg"] == [10, 20]


def test_an_absent_metric_is_an_empty_series(api, bob, gpu):
    body = get(api, bob, f"/api/v1/gpus/{gpu.uuid}/metrics/", metric="tensor_active_pct",
               start="2026-12-01T11:00:00Z", end="2026-12-01T13:00:00Z").json()
    assert body["series"]["tensor_active_pct"] == {"t": [], "avg": [], "min": [], "max": []}


@pytest.mark.parametrize(("span", "tier"), [(timedelta(hours=6), "raw"), (timedelta(days=2), "1m"), (timedelta(days=30), "1h")])
def test_the_tier_follows_the_range(api, bob, gpu, span, tier):
    end = START + timedelta(hours=1)
    body = get(api, bob, f"/api/v1/gpus/{gpu.uuid}/metrics/", start=(end - span).isoformat(), end=end.isoformat()).json()
    assert body["tier"] == tier


def test_instance_metrics_are_keyed_by_gpu(api, bob, gpu, acme_instance):
    body = get(api, bob, f"/api/v1/instances/{acme_instance.pk}/metrics/",
               start="2026-12-01T12:00:00Z", end="2026-12-01T12:01:00Z").json()
    assert body["instance"] == acme_instance.pk
    assert list(body["gpus"]) == [gpu.uuid]
    assert body["gpus"][gpu.uuid]["gpu_util"]["avg"] == [10, 20, 30, 40]


@pytest.mark.parametrize(("params", "param"), [
    ({"metric": "bogus"}, "metric"),
    ({"start": "yesterday"}, "start"),
    ({"end": "nan"}, "end"),
    ({"start": "2026-12-01T13:00:00Z", "end": "2026-12-01T12:00:00Z"}, "start"),
    ({"start": "1e300"}, "start"),
    ({"start": "2020-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "start"),
    ({"points": "0"}, "points"),
    ({"points": "many"}, "points"),
])
def test_bad_parameters_answer_400_naming_them(api, bob, gpu, params, param):
    response = get(api, bob, f"/api/v1/gpus/{gpu.uuid}/metrics/", **params)
    assert response.status_code == 400
    assert list(response.json()) == [param]


def test_an_unknown_gpu_is_404(api, bob, gpu):
    assert get(api, bob, "/api/v1/gpus/GPU-nope/metrics/").status_code == 404
