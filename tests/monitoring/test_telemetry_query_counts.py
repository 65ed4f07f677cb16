"""The telemetry list endpoints answer in a fixed number of queries, however many rows."""

import pytest
from django.utils import timezone

from alerting.models import Alert
from monitoring.models import GpuEvent, GpuLatest


@pytest.fixture
def rows(fleet, tokens, acme):
    now = timezone.now()
    for gpu in fleet["hosts"]["h100-a"].gpus.all():
        GpuLatest.objects.create(uuid=gpu.uuid, gpu=gpu, host=gpu.host, time=now, last_seen=now, metrics={"gpu_util": 1})
        GpuEvent.objects.create(kind="xid", code=13, host=gpu.host, gpu=gpu, uuid=gpu.uuid)
        Alert.objects.create(kind="temperature", key=f"temperature:{gpu.uuid}", host=gpu.host, gpu=gpu, message="hot",
                             team=acme)


@pytest.mark.parametrize(("url", "limit"), [
    ("/api/v1/alerts/", 4), ("/api/v1/gpu-events/", 4), ("/api/v1/gpu-latest/", 4), ("/api/v1/host-tokens/", 4),
])
def test_list_endpoints(api, ops, rows, url, limit, django_assert_max_num_queries):
    with django_assert_max_num_queries(limit):
        response = api(ops).get(url)
    assert response.status_code == 200 and response.json()["count"] >= 4


def test_gpu_metrics(api, ops, rows, fleet, django_assert_max_num_queries):
    uuid = fleet["hosts"]["h100-a"].gpus.first().uuid
    with django_assert_max_num_queries(3):
        assert api(ops).get(f"/api/v1/gpus/{uuid}/metrics/", {"metric": ["gpu_util", "temp_c"]}).status_code == 200
