"""A team reads the telemetry of the GPUs its instances hold, and only its own
samples of them; operators read everything; charlie gets 404 for Acme's."""

import pytest
from telemetry_wire import add_samples, utc

START = utc(2026, 12, 1, 12, 0, 0)
RANGE = {"start": "2026-12-01T12:00:00Z", "end": "2026-12-01T12:10:00Z"}


@pytest.fixture
def held(acme_instance):
    gpu = acme_instance.gpus.order_by("index").first()
    add_samples(gpu, START, [{"gpu_util": 55}], instance=acme_instance)
    return gpu


def test_charlie_gets_404_for_an_acme_gpu(api, charlie, held):
    assert api(charlie).get(f"/api/v1/gpus/{held.uuid}/metrics/", RANGE).status_code == 404


def test_charlie_gets_404_for_an_acme_instance(api, charlie, acme_instance, held):
    assert api(charlie).get(f"/api/v1/instances/{acme_instance.pk}/metrics/", RANGE).status_code == 404


def test_bob_reads_his_teams_gpu(api, bob, held):
    body = api(bob).get(f"/api/v1/gpus/{held.uuid}/metrics/", RANGE).json()
    assert body["series"]["gpu_util"]["avg"] == [55]


def test_bob_does_not_see_what_globex_ran_on_it_before(api, bob, held, globex):
    add_samples(held, utc(2026, 12, 1, 12, 5), [{"gpu_util": 99}], team=globex)
    body = api(bob).get(f"/api/v1/gpus/{held.uuid}/metrics/", RANGE).json()
    assert body["series"]["gpu_util"]["avg"] == [55]


def test_operators_read_any_gpu(api, ops, held, fleet):
    free = fleet["hosts"]["h100-b"].gpus.first()
    add_samples(free, START, [{"gpu_util": 1}])
    assert api(ops).get(f"/api/v1/gpus/{free.uuid}/metrics/", RANGE).json()["series"]["gpu_util"]["avg"] == [1]
    assert api(ops).get(f"/api/v1/gpus/{held.uuid}/metrics/", RANGE).status_code == 200


def test_anonymous_gets_401(api, held):
    assert api().get(f"/api/v1/gpus/{held.uuid}/metrics/", RANGE).status_code == 401
