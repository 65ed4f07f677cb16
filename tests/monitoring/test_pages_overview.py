"""The overview: a team's running instances with a live tile per GPU, its open alerts
and this month's cost; for operators, the whole fleet."""

from datetime import timedelta

import pytest
from django.utils import timezone

from alerting.models import Alert, AlertKind
from instances.models import GpuModel, Host
from monitoring.models import GpuLatest


def report(gpu, **metrics):
    now = timezone.now()
    return GpuLatest.objects.create(
        gpu=gpu,
        uuid=gpu.uuid,
        host=gpu.host,
        instance=gpu.instance,
        team=gpu.team,
        time=now,
        last_seen=now,
        metrics=metrics,
    )


@pytest.fixture
def acme_reporting(acme_instance):
    for gpu in acme_instance.gpus.all():
        report(gpu, gpu_util=97.0, temp_c=71, power_mw=650_000, mem_used=60 * 2**30)
    return acme_instance


def test_bob_sees_a_tile_for_each_acme_gpu(client, bob, acme_reporting, globex_instance):
    client.force_login(bob)
    page = client.get("/").content.decode()
    assert "acme-train" in page and "globex-train" not in page
    assert page.count('class="gpu-tile') == 2
    assert ">97<" in page and "650 / 700 W" in page


def test_charlie_sees_globex_only(client, charlie, acme_reporting, globex_instance):
    client.force_login(charlie)
    page = client.get("/").content.decode()
    assert "globex-train" in page and "acme-train" not in page
    assert page.count('class="gpu-tile') == 1


def test_a_gpu_whose_agent_went_quiet_is_stale(client, bob, acme_instance):
    gpu = acme_instance.gpus.first()
    row = report(gpu, gpu_util=50.0)
    GpuLatest.objects.filter(pk=row.pk).update(last_seen=timezone.now() - timedelta(minutes=5))
    client.force_login(bob)
    page = client.get("/").content.decode()
    assert f'stale" data-uuid="{gpu.uuid}"' in page


def test_the_team_page_subscribes_to_its_team_only(client, bob, acme, acme_instance):
    client.force_login(bob)
    live = client.get("/").context["live"]
    assert live["subscribe"] == [{"kind": "team", "id": acme.pk}]


def test_open_alerts_are_listed_for_their_team(client, bob, charlie, acme, globex, acme_instance):
    Alert.objects.create(kind=AlertKind.TEMPERATURE, key="t:a", team=acme, message="acme gpu hot")
    Alert.objects.create(
        kind=AlertKind.TEMPERATURE, key="t:g", team=globex, message="globex gpu hot"
    )
    client.force_login(bob)
    page = client.get("/").content.decode()
    assert "acme gpu hot" in page and "globex gpu hot" not in page


def test_cost_shows_a_dash_without_billing(client, bob, acme_instance, monkeypatch):
    monkeypatch.setattr("monitoring.figures.month_to_date", lambda team: None)
    client.force_login(bob)
    response = client.get("/")
    assert "Acme · cost this month" in response.content.decode()
    assert response.context["teams"][0]["cost"] is None


def test_operators_get_the_fleet_with_heatmap_and_capacity(client, ops, fleet, acme_instance):
    client.force_login(ops)
    response = client.get("/")
    assert response.templates[0].name == "monitoring/fleet.html"
    heat = response.context["heatmap"]["data"][0]
    assert heat["y"] == ["a100-mig", "h100-a", "h100-b", "h200-a"]
    capacity = {r["model"]: (r["used"], r["free"]) for r in response.context["capacity"]}
    assert capacity["H100-80GB"] == (2, 14)


def test_the_fleet_heatmap_shows_each_gpus_utilization(client, ops, fleet, acme_reporting):
    client.force_login(ops)
    response = client.get("/")
    row = response.context["heatmap"]["data"][0]["y"].index(acme_reporting.host.name)
    assert sorted(response.context["heatmap"]["data"][0]["z"][row], key=lambda v: v is None)[
        :2
    ] == [97.0, 97.0]


def test_each_heatmap_row_leads_to_its_host(client, ops, fleet):
    client.force_login(ops)
    urls = client.get("/").context["live"]["host_urls"]
    assert urls["h100-a"] == f"/hosts/{fleet['hosts']['h100-a'].pk}/"


def test_a_tile_says_why_it_has_no_tensor_activity(client, bob, acme_reporting):
    GpuModel.objects.filter(pk=acme_reporting.gpu_model_id).update(architecture="Hopper")
    client.force_login(bob)
    assert client.get("/").content.decode().count('data-missing="not yet"') == 2
    Host.objects.filter(pk=acme_reporting.host_id).update(kind="vgpu")
    page = client.get("/").content.decode()
    assert page.count('data-missing="not reported" title="vGPU mode: NVML reports no tensor-core activity') == 2
