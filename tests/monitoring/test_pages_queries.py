"""The overview reads what it shows in a fixed number of queries, whatever the fleet size."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from instances.models import Gpu, Host
from monitoring.models import GpuLatest


def grow(fleet, hosts):
    now = timezone.now()
    for h in range(hosts):
        host = Host.objects.create(name=f"extra-{h}", region=fleet["region"])
        for i in range(8):
            gpu = Gpu.objects.create(
                host=host,
                index=i,
                uuid=f"GPU-extra-{h}-{i}",
                model=fleet["h100"],
                memory_total=80 * 2**30,
            )
            GpuLatest.objects.create(
                gpu=gpu,
                uuid=gpu.uuid,
                host=host,
                time=now,
                last_seen=now,
                metrics={"gpu_util": 10.0 * i},
            )


def queries_for(client, path):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200
    return len(ctx)


@pytest.mark.parametrize("user", ["ops", "bob"])
def test_overview_queries_do_not_grow_with_the_fleet(client, request, fleet, acme_instance, user):
    client.force_login(request.getfixturevalue(user))
    small = queries_for(client, "/")
    grow(fleet, 6)
    assert queries_for(client, "/") == small


def test_host_page_queries_do_not_grow_with_its_gpus(client, ops, fleet):
    client.force_login(ops)
    host = fleet["hosts"]["h100-a"]
    small = queries_for(client, f"/hosts/{host.pk}/")
    for i in range(8, 16):
        Gpu.objects.create(
            host=host, index=i, uuid=f"GPU-more-{i}", model=fleet["h100"], memory_total=1
        )
    assert queries_for(client, f"/hosts/{host.pk}/") == small
