"""The overview's figures cover the whole fleet (or all of a team's instances) while
the page draws one page of hosts or instances; the page and /api/v1/overview/ give
the same figures, from one function."""

from datetime import timedelta

import pytest
from django.utils import timezone

from alerting.models import Alert, AlertKind
from monitoring import pages
from monitoring.models import AgentState, GpuLatest

pytestmark = pytest.mark.django_db


def report(gpu, *, age_s=0, **metrics):
    seen = timezone.now() - timedelta(seconds=age_s)
    return GpuLatest.objects.create(gpu=gpu, uuid=gpu.uuid, host=gpu.host, instance=gpu.instance, team=gpu.team,
                                    time=seen, last_seen=seen, metrics=metrics)


def api_figures(api, user) -> dict:
    response = api(user).get("/api/v1/overview/")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def readings(fleet, acme_instance):
    a, b = acme_instance.gpus.order_by("index")
    report(a, gpu_util=90.0)
    report(b, gpu_util=30.0)
    report(fleet["hosts"]["a100-mig"].gpus.first(), gpu_util=100.0, age_s=600)  # stale: left out
    report(fleet["hosts"]["h200-a"].gpus.first(), temp_c=40)  # fresh, no utilization
    AgentState.objects.create(host=acme_instance.host, connected=True)
    Alert.objects.create(kind=AlertKind.TEMPERATURE, key="t", host=fleet["hosts"]["h200-a"], message="hot")
    return fleet


def test_the_operator_page_and_api_agree_and_cover_every_host(client, api, ops, readings, monkeypatch):
    monkeypatch.setattr(pages, "HOSTS_PER_PAGE", 2)
    client.force_login(ops)
    first, second = client.get("/").context, client.get("/?page=2").context
    totals = first["totals"]
    assert totals == second["totals"]
    assert (totals["hosts"], totals["gpus"], totals["used"]) == (4, 19, 2)
    assert (totals["reporting"], totals["mean_util"], totals["agents_up"], totals["alerts"]) == (2, 60, 1, 1)
    assert first["capacity"] == second["capacity"]
    shown = [[h["host"].name for r in c["regions"] for h in r["hosts"]] for c in (first, second)]
    assert shown == [["a100-mig", "h100-a"], ["h100-b", "h200-a"]]
    assert first["heatmap"]["data"][0]["y"] == ["a100-mig", "h100-a"]
    assert set(first["live"]["heat_index"]) == {f"GPU-h100-a-{i}" for i in range(8)} | {"GPU-a100-mig-0",
                                                                                         "GPU-a100-mig-1"}
    api_view = api_figures(api, ops)
    assert api_view == {"scope": "fleet", **totals, "capacity": first["capacity"]}


def test_a_page_past_the_end_shows_the_last_and_a_bad_one_the_first(client, ops, readings, monkeypatch):
    monkeypatch.setattr(pages, "HOSTS_PER_PAGE", 3)
    client.force_login(ops)
    assert client.get("/?page=99").context["page"].number == 2
    assert client.get("/?page=x").context["page"].number == 1


def test_the_member_page_and_api_agree_and_cover_every_instance(client, api, bob, launch, acme, readings,
                                                                 monkeypatch):
    launch(bob, acme, name="second")  # pending, one GPU placed
    monkeypatch.setattr(pages, "INSTANCES_PER_PAGE", 1)
    client.force_login(bob)
    first, second = client.get("/").context, client.get("/?page=2").context
    assert [len(c["instances"]) for c in (first, second)] == [1, 1]
    figures = {k: first[k] for k in ("holding_count", "running_count", "gpu_count", "mean_util", "alert_count")}
    assert figures == {k: second[k] for k in figures}
    assert figures == {"holding_count": 2, "running_count": 1, "gpu_count": 3, "mean_util": 60, "alert_count": 0}
    assert api_figures(api, bob) == {"scope": "teams", "holding": 2, "running": 1, "gpus": 3, "mean_util": 60,
                                     "alerts": 0}
