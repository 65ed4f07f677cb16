"""The instance page's chart panel: its devices and figure templates for the
instance's team only, and throttle runs from raw samples."""

from datetime import timedelta

from django.utils import timezone

from instances import services as instance_services
from monitoring.models import Sample


def test_bob_gets_the_panel_of_an_acme_instance(client, bob, acme_instance):
    client.force_login(bob)
    panel = client.get(f"/monitoring/instances/{acme_instance.pk}/panel/").json()
    assert [d["uuid"] for d in panel["devices"]] == [
        g.uuid for g in acme_instance.gpus.order_by("index")
    ]
    assert panel["source"] == {
        "kind": "instance",
        "url": f"/api/v1/instances/{acme_instance.pk}/metrics/",
    }
    assert panel["live"] == {"kind": "instance", "id": acme_instance.pk}
    figures = panel["figure_sets"][panel["devices"][0]["figures"]]
    assert figures["power"]["layout"]["shapes"][0]["y0"] == 700.0


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
    body = client.get(f"/monitoring/gpus/{gpu.uuid}/throttle/").json()
    assert [s["reasons"] for s in body["segments"]] == [["software power cap"]]


def test_throttle_names_a_bad_start(client, bob, acme_instance):
    client.force_login(bob)
    response = client.get(
        f"/monitoring/gpus/{acme_instance.gpus.first().uuid}/throttle/?start=yesterday"
    )
    assert response.status_code == 400
    assert "start" in response.json()


def test_charlie_gets_404_for_acme_throttle(client, charlie, acme_instance):
    client.force_login(charlie)
    assert (
        client.get(f"/monitoring/gpus/{acme_instance.gpus.first().uuid}/throttle/").status_code
        == 404
    )


def test_a_stopped_instance_charts_the_gpus_it_reported_from(client, bob, acme_instance):
    gpu = acme_instance.gpus.first()
    Sample.objects.create(
        gpu=gpu, team=gpu.team, instance=acme_instance, time=timezone.now(), gpu_util=5.0
    )
    instance_services.stop_instance(actor=bob, instance=acme_instance, finish=False)
    instance_services.finish_stop(instance=acme_instance)
    client.force_login(bob)
    panel = client.get(f"/monitoring/instances/{acme_instance.pk}/panel/").json()
    assert [d["uuid"] for d in panel["devices"]] == [gpu.uuid]
