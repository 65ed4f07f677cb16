"""An operator's API token limited to some teams reads, on /metrics as everywhere, only
those teams: their GPUs' series and alerts, not another team's nor the fleet's agents."""

import pytest
from django.test import Client
from django.utils import timezone

from console import services as console_services
from monitoring.models import AgentState, GpuLatest

pytestmark = pytest.mark.django_db


def latest(instance):
    gpu = instance.gpus.order_by("index").first()
    now = timezone.now()
    return GpuLatest.objects.create(uuid=gpu.uuid, gpu=gpu, host=gpu.host, time=now, last_seen=now,
                                    metrics={"gpu_util": 42}, team=instance.team, instance=instance)


@pytest.fixture
def readings(acme_instance, globex_instance):
    latest(acme_instance)
    latest(globex_instance)
    AgentState.objects.create(host=acme_instance.gpus.first().host, connected=True)


def scrape(ops, teams=()):
    _, raw = console_services.create_api_token(actor=ops, user=ops, name="prometheus", teams=teams)
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Token {raw}")
    assert response.status_code == 200
    return response.content.decode()


def test_a_token_limited_to_acme_reads_only_acmes_gpus(ops, acme, readings):
    text = scrape(ops, teams=[acme])
    assert 'team="acme"' in text
    assert 'team="globex"' not in text and "globex-train" not in text
    assert "gpuconsole_agent_connected{" not in text


def test_an_unlimited_operator_token_reads_every_team(ops, readings):
    text = scrape(ops)
    assert 'team="acme"' in text and 'team="globex"' in text
    assert "gpuconsole_agent_connected{" in text


def test_a_limited_operator_token_has_no_fleet_wide_powers(api, ops, acme, fleet):
    _, raw = console_services.create_api_token(actor=ops, user=ops, name="ci", teams=[acme])
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    response = client.post("/api/v1/teams/", {"name": "Initech"})
    assert response.status_code == 403
    unlimited = api(ops).post("/api/v1/teams/", {"name": "Initech"})
    assert unlimited.status_code == 201


def test_a_limited_operator_token_gets_the_teams_overview_not_the_fleets(api, ops, acme, readings):
    _, raw = console_services.create_api_token(actor=ops, user=ops, name="ci", teams=[acme])
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert client.get("/api/v1/overview/").json()["scope"] == "teams"
    assert api(ops).get("/api/v1/overview/").json()["scope"] == "fleet"
