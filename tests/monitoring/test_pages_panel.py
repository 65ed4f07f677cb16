"""The instance page's chart panel: its devices for the instance's team only, and
figures built on the server (monitoring/panels.py) with history, gaps and throttle
runs from raw samples."""

from datetime import timedelta

from django.utils import timezone

from instances import lifecycle as instance_lifecycle
from monitoring.models import Sample


def test_bob_gets_the_panel_of_an_acme_instance(client, bob, acme_instance):
    client.force_login(bob)
    panel = client.get(f"/monitoring/instances/{acme_instance.pk}/panel/").json()
    assert [d["uuid"] for d in panel["devices"]] == [
        g.uuid for g in acme_instance.gpus.order_by("index")
    ]
    assert panel["figures_url"] == f"/monitoring/instances/{acme_instance.pk}/figures/?device={{uuid}}"
    assert panel["overlay_url"] == f"/monitoring/instances/{acme_instance.pk}/figures/?device=all"
    assert panel["live"] == {"kind": "instance", "id": acme_instance.pk}
    # The first view (live, both GPUs overlaid) comes with the config: no second round trip.
    first = panel["first"]["figures"]["utilization"]
    assert [t["meta"]["uuid"] for t in first["data"]] == [d["uuid"] for d in panel["devices"]]


def test_one_device_gets_its_own_charts_against_its_limits(client, bob, acme_instance):
    gpu = acme_instance.gpus.first()
    client.force_login(bob)
    body = client.get(f"/monitoring/instances/{acme_instance.pk}/figures/?device={gpu.uuid}").json()
    assert list(body["figures"]) == ["utilization", "tflops", "memory", "power", "temperature", "clocks"]
    assert body["figures"]["power"]["layout"]["shapes"][0]["y0"] == 700.0
    empty = body["figures"]["utilization"]
    assert empty["empty"] and empty["layout"]["xaxis"]["range"][0].startswith(body["start"][:10])


def test_all_devices_overlay_one_line_each(client, bob, acme_instance):
    gpus = list(acme_instance.gpus.order_by("index"))
    now = timezone.now()
    for i in range(3):
        Sample.objects.create(gpu=gpus[1], team=gpus[1].team, instance=acme_instance,
                              time=now - timedelta(seconds=10 - i), gpu_util=40.0 + i)
    client.force_login(bob)
    window = f"start={int(now.timestamp()) - 900}&end={int(now.timestamp()) + 1}"
    body = client.get(f"/monitoring/instances/{acme_instance.pk}/figures/?device=all&live=1&{window}").json()
    util = body["figures"]["utilization"]["data"]
    assert [t["meta"]["uuid"] for t in util] == [g.uuid for g in gpus]
    assert [t["y"] for t in util] == [[], [40.0, 41.0, 42.0]]
    assert util[0]["visible"] is False and util[0]["line"]["color"] != util[1]["line"]["color"]


def test_the_history_breaks_where_the_agent_went_quiet(client, bob, acme_instance):
    gpu = acme_instance.gpus.first()
    start = timezone.now() - timedelta(minutes=10)
    for offset in (0, 1, 2, 3, 120, 121, 122):
        Sample.objects.create(gpu=gpu, team=gpu.team, instance=acme_instance,
                              time=start + timedelta(seconds=offset), gpu_util=50.0)
    client.force_login(bob)
    window = f"start={int(start.timestamp()) - 60}&end={int(start.timestamp()) + 840}"
    body = client.get(f"/monitoring/instances/{acme_instance.pk}/figures/?device={gpu.uuid}&live=1&{window}").json()
    util = next(t for t in body["figures"]["utilization"]["data"]
                if t["meta"]["metric"] == "gpu_util" and t["meta"]["stat"] == "avg")
    assert util["y"] == [50.0, 50.0, 50.0, 50.0, None, 50.0, 50.0, 50.0]


def test_charlie_gets_404_for_the_panel_of_an_acme_instance(client, charlie, acme_instance):
    client.force_login(charlie)
    assert client.get(f"/monitoring/instances/{acme_instance.pk}/panel/").status_code == 404


def test_the_instance_page_includes_the_live_panel(client, bob, acme_instance):
    client.force_login(bob)
    page = client.get(f"/instances/{acme_instance.pk}/").content.decode()
    assert f'data-config-url="/monitoring/instances/{acme_instance.pk}/panel/"' in page
    assert "plotly/plotly.min.js" in page


def test_throttle_runs_come_from_raw_samples(client, bob, acme_instance):
    gpu = acme_instance.gpus.first()
    start = timezone.now() - timedelta(minutes=5)
    for i, mask in enumerate([1, 4, 4, 1]):
        Sample.objects.create(
            gpu=gpu,
            team=gpu.team,
            instance=acme_instance,
            time=start + timedelta(seconds=i),
            clocks_event_reasons=mask,
        )
    client.force_login(bob)
    body = client.get(f"/monitoring/instances/{acme_instance.pk}/figures/?device={gpu.uuid}").json()
    clocks = body["figures"]["clocks"]
    marks = next(t for t in clocks["data"] if t["meta"]["stat"] == "throttle")
    assert marks["text"] == ["software power cap"]
    assert [s["type"] for s in clocks["layout"]["shapes"]].count("rect") == 1


def test_figures_name_a_bad_start_or_device(client, bob, acme_instance):
    client.force_login(bob)
    url = f"/monitoring/instances/{acme_instance.pk}/figures/"
    response = client.get(url + "?start=yesterday")
    assert response.status_code == 400 and "start" in response.json()
    response = client.get(url + "?device=GPU-nope")
    assert response.status_code == 400 and "device" in response.json()


def test_charlie_gets_404_for_acme_figures(client, charlie, acme_instance):
    client.force_login(charlie)
    assert client.get(f"/monitoring/instances/{acme_instance.pk}/figures/").status_code == 404


def test_a_stopped_instance_charts_the_gpus_it_reported_from(client, bob, acme_instance):
    gpu = acme_instance.gpus.first()
    Sample.objects.create(
        gpu=gpu, team=gpu.team, instance=acme_instance, time=timezone.now(), gpu_util=5.0
    )
    instance_lifecycle.stop_instance(actor=bob, instance=acme_instance, finish=False)
    instance_lifecycle.finish_stop(instance=acme_instance)
    client.force_login(bob)
    panel = client.get(f"/monitoring/instances/{acme_instance.pk}/panel/").json()
    assert [d["uuid"] for d in panel["devices"]] == [gpu.uuid]


def test_a_device_without_gpm_has_no_tflops_chart_and_an_a100_slice_no_utilization(client, charlie, globex, fleet,
                                                                                   launch):
    # NVML's GPM begins with Hopper: an A100 reports no tensor activity, and its MIG
    # slices (no NVML utilization on MIG devices) no activity at all.
    fleet["a100"].architecture = "Ampere"
    fleet["a100"].save()
    fleet["h100"].architecture = "Hopper"
    fleet["h100"].save()
    slice_nb = launch(charlie, globex, name="nb", model="A100-80GB", slice_profile=fleet["mig"])
    hopper = launch(charlie, globex, name="train", model="H100-80GB")
    client.force_login(charlie)
    panels = {i.name: client.get(f"/monitoring/instances/{i.pk}/panel/").json() for i in (slice_nb, hopper)}
    figures = {name: panel["first"]["figures"] for name, panel in panels.items()}
    assert [d["tflops_basis"] for d in panels["nb"]["devices"]] == [None]
    assert panels["train"]["devices"][0]["tflops_basis"]["precision"] == "bf16"
    assert list(figures["nb"]) == ["memory"]
    assert list(figures["train"]) == ["utilization", "tflops", "memory", "power", "temperature", "clocks"]
    page = client.get(f"/instances/{slice_nb.pk}/").content.decode()
    assert "No TFLOP/s estimate: the A100-80GB (Ampere) reports no tensor-core activity" in page
    assert 'name="precision"' not in page
    assert 'name="precision"' in client.get(f"/instances/{hopper.pk}/").content.decode()
    assert "idle stop never finds it idle" in page
