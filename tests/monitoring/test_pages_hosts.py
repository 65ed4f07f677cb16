"""Host and GPU detail pages are for operators: GPUs with live tiles, slices,
XID/ECC history, per-process memory and the chart panel."""

from django.utils import timezone

from monitoring.models import EventKind, GpuEvent, Sample


def test_members_may_not_open_a_host_page(client, bob, fleet):
    client.force_login(bob)
    assert client.get(f"/hosts/{fleet['hosts']['h100-a'].pk}/").status_code == 403


def test_members_may_not_open_a_gpu_page(client, bob, acme_instance):
    client.force_login(bob)
    assert client.get(f"/gpus/{acme_instance.gpus.first().uuid}/").status_code == 403


def test_an_unknown_host_is_404(client, ops, fleet):
    client.force_login(ops)
    assert client.get("/hosts/999999/").status_code == 404


def test_the_host_page_lists_gpus_slices_and_xid_history(client, ops, fleet):
    host = fleet["hosts"]["a100-mig"]
    gpu = host.gpus.first()
    GpuEvent.objects.create(
        kind=EventKind.XID, host=host, gpu=gpu, uuid=gpu.uuid, code=79, message="fell off the bus"
    )
    client.force_login(ops)
    response = client.get(f"/hosts/{host.pk}/")
    page = response.content.decode()
    assert page.count('class="gpu-tile') == 2
    assert "MIG-a100-mig-0-6" in page
    assert "fell off the bus" in page
    # A MIG host's charts offer its slices first (its GPUs report no utilization of their own).
    assert [d["uuid"] for d in response.context["panel"]["devices"]] == [
        *(f"MIG-a100-mig-{g}-{k}" for g in range(2) for k in range(7)),
        "GPU-a100-mig-0",
        "GPU-a100-mig-1",
    ]


def test_the_gpu_page_shows_memory_per_process(client, ops, fleet, acme_instance):
    gpu = acme_instance.gpus.first()
    procs = [{"pid": 4242, "used_memory": 60 * 2**30}, {"pid": 7, "used_memory": 2**30}]
    Sample.objects.create(gpu=gpu, time=timezone.now(), gpu_util=90.0, procs=procs)
    client.force_login(ops)
    response = client.get(f"/gpus/{gpu.uuid}/")
    assert [p["pid"] for p in response.context["procs"]] == [4242, 7]
    assert "60.0 GiB" in response.content.decode()


def test_the_gpu_panel_charts_ecc_too(client, ops, fleet):
    gpu = fleet["hosts"]["h100-a"].gpus.first()
    client.force_login(ops)
    panel = client.get(f"/gpus/{gpu.uuid}/").context["panel"]
    assert panel["figures_url"] == "/monitoring/gpus/{uuid}/figures/"
    figures = client.get(f"/monitoring/gpus/{gpu.uuid}/figures/").json()["figures"]
    assert list(figures) == ["utilization", "memory", "power", "temperature", "clocks", "ecc"]


def test_members_may_not_read_a_gpus_figures(client, bob, acme_instance):
    client.force_login(bob)
    assert client.get(f"/monitoring/gpus/{acme_instance.gpus.first().uuid}/figures/").status_code == 403
