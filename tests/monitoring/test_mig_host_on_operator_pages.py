"""A GPU in MIG mode reports no utilization of its own (NVML has none), only its slices
do: operator pages count it through its slices, so a MIG host does not look dead while
its tenants' slice charts have data."""

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring import figures
from monitoring.models import GpuLatest, Sample


@pytest.fixture
def mig_readings(fleet):
    """gpu0 of a100-mig in MIG mode: its own reading has power and temperature only; its
    seven 1g slices' latest readings have memory only (utilization comes with the slower
    GPM readings), and their samples of the last seconds say 70 (then 50, 90: 70 on
    average), 0, 0, 0, 0, 0 and 0 % (a tenant's slice is busy)."""
    now = timezone.now()
    host = fleet["hosts"]["a100-mig"]
    gpu = host.gpus.get(index=0)
    GpuLatest.objects.create(uuid=gpu.uuid, host=host, gpu=gpu, time=now, last_seen=now,
                             metrics={"power_mw": 120_000, "temp_c": 41, "mem_used": 12 * 1024**3})
    for k, piece in enumerate(gpu.slices.order_by("gpu_instance_id")):
        GpuLatest.objects.create(uuid=piece.uuid, host=host, gpu=gpu, slice=piece, time=now, last_seen=now,
                                 metrics={"mem_used": 1024**3})
        utils = (50, 90) if k == 0 else (0,)
        Sample.objects.bulk_create(Sample(gpu=gpu, slice=piece, time=now - timedelta(seconds=2 + i), gpu_util=u)
                                   for i, u in enumerate(utils))
    # Older than two staleness periods: not read.
    Sample.objects.create(gpu=gpu, slice=gpu.slices.last(), time=now - timedelta(minutes=5), gpu_util=100)
    return host, gpu


def test_a_gpu_in_mig_mode_reports_through_its_slices(mig_readings):
    host, gpu = mig_readings
    assert figures.sliced_util(timezone.now()) == {gpu.pk: pytest.approx(10.0)}
    totals = figures.fleet_totals(timezone.now())
    assert (totals["reporting"], totals["mean_util"]) == (1, 10)


def test_a_gpu_with_its_own_utilization_is_not_counted_twice(mig_readings):
    host, gpu = mig_readings
    GpuLatest.objects.filter(uuid=gpu.uuid).update(metrics={"gpu_util": 50})
    assert figures.sliced_util(timezone.now()) == {}
    assert figures.fleet_totals(timezone.now())["mean_util"] == 50


def test_the_fleet_page_draws_the_mig_host(client, ops, mig_readings):
    host, gpu = mig_readings
    client.force_login(ops)
    context = client.get("/").context
    heat = dict(zip(context["heatmap"]["data"][0]["y"], context["heatmap"]["data"][0]["z"], strict=True))
    assert heat[host.name][0] == pytest.approx(10.0)
    summary = next(s for r in context["regions"] for s in r["hosts"] if s["host"] == host)
    assert summary["mean_util"] == 10
    assert context["totals"]["reporting"] == 1
    parent = context["live"]["slice_index"][gpu.slices.first().uuid]
    assert parent[:2] == context["live"]["heat_index"][gpu.uuid] and parent[3] == gpu.uuid


def test_the_host_page_shows_the_gpus_utilization_and_charts_its_slices(client, ops, mig_readings):
    host, gpu = mig_readings
    client.force_login(ops)
    context = client.get(f"/hosts/{host.pk}/").context
    tile = next(d for d in context["devices"] if d["uuid"] == gpu.uuid)["tile"]
    assert tile["util"] == 10
    charted = [d["uuid"] for d in context["panel"]["devices"]]
    assert charted[0].startswith("MIG-") and len(charted) == 2 + 14
    assert gpu.uuid in charted


def test_the_host_page_tells_the_browser_which_slices_make_a_gpu(client, ops, mig_readings):
    host, gpu = mig_readings
    client.force_login(ops)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    tile = page.split(f'data-uuid="{gpu.uuid}"')[1].split(">")[0]
    assert 'data-sliced-util="10"' in tile
    slices = dict(pair.split("=") for pair in tile.split('data-slices="')[1].split('"')[0].split(","))
    assert set(slices) == set(gpu.slices.values_list("uuid", flat=True))
    assert {round(float(share), 4) for share in slices.values()} == {round(1 / 7, 4)}


def _tile(html: str, uuid: str) -> str:
    """The holder line of a GPU's tile."""
    start = html.index('<div class="tile-holder', html.index(f'data-uuid="{uuid}"'))
    return html[start:html.index("</div>", start)]


def test_a_gpu_whose_slice_is_held_is_not_called_free(fleet, launch, charlie, globex, logged_in_ops):
    """GPUs of a MIG host are offered as slices, never whole: the host page's tile of a GPU
    reads how many of its slices are held and by whom, as the GPU's page does."""
    instance = launch(charlie, globex, name="globex-nb", model="A100-80GB", slice_profile=fleet["mig"])
    held = instance.slices.get().gpu
    other = fleet["hosts"]["a100-mig"].gpus.exclude(pk=held.pk).get()
    html = logged_in_ops.get(f"/hosts/{held.host_id}/").content.decode()
    assert "1 of 7 slices held" in _tile(html, held.uuid) and "globex-nb" in _tile(html, held.uuid)
    assert "0 of 7 slices held" in _tile(html, other.uuid)
    assert ">free<" not in _tile(html, held.uuid) + _tile(html, other.uuid)
    page = logged_in_ops.get(f"/gpus/{held.uuid}/").content.decode()
    assert "1 of 7 slices held, see below" in page


@pytest.fixture
def logged_in_ops(client, ops):
    client.force_login(ops)
    return client
