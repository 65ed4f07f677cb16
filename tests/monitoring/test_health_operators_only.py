"""Health, diagnostics and cordons are the operators': a team's admin, member or
auditor gets 403 and sees none of it."""

import pytest
from health_sim import sim_of, tick

from instances.models import Gpu
from monitoring import verdicts

PATHS = ["/api/v1/hosts/{pk}/health/", "/api/v1/hosts/{pk}/diagnostics/",
         "/api/v1/hosts/{pk}/diagnostics/1/download/"]
POSTS = ["/api/v1/hosts/{pk}/diagnostics/", "/api/v1/hosts/{pk}/cordon/", "/api/v1/hosts/{pk}/drain/",
         "/api/v1/gpus/GPU-h200-a-0/cordon/"]


@pytest.mark.parametrize("who", ["alice", "bob", "audrey", "charlie"])
def test_tenants_get_403_on_every_health_surface(who, request, api, fleet):
    user = request.getfixturevalue(who)
    pk = fleet["hosts"]["h200-a"].pk
    for url in PATHS:
        assert api(user).get(url.format(pk=pk)).status_code == 403, url
    for url in POSTS:
        assert api(user).post(url.format(pk=pk)).status_code == 403, url
    assert Gpu.objects.get(uuid="GPU-h200-a-0").cordoned_at is None


def test_a_tenant_whose_instance_runs_on_a_failed_gpu_sees_no_health_alert(api, bob, acme, launch, fleet):
    from instances import lifecycle

    lifecycle.mark_running(instance=launch(bob, acme, model="H200-141GB"))
    gpu = Gpu.objects.select_related("host").get(uuid="GPU-h200-a-0")
    tick(gpu, sim_of(gpu, "xid:79"))
    verdicts.evaluate()
    kinds = {a["kind"] for a in api(bob).get("/api/v1/alerts/").json()["results"]}
    assert "gpu_health" not in kinds


def test_the_operator_reads_the_failing_gpu_in_words(api, ops, fleet):
    gpu = Gpu.objects.select_related("host").get(uuid="GPU-h200-a-0")
    tick(gpu, sim_of(gpu, "remap_failed"))
    verdicts.evaluate()
    body = api(ops).get(f"/api/v1/hosts/{gpu.host_id}/health/").json()
    assert body["state"] == "failed"
    assert body["gpus"][0]["reasons"][0]["text"].startswith("row remapping failed")
    assert body["gpus"][0]["cordoned"] is True
    [row] = [h for h in api(ops).get("/api/v1/hosts/").json()["results"] if h["name"] == "h200-a"]
    assert row["health"] == "failed" and row["gpus_cordoned"] == 1 and row["gpus_free"] == 0


def test_metrics_carry_the_health_gauge_for_operators_only(api, ops, fleet, client, bob, acme, launch):
    gpu = Gpu.objects.select_related("host").get(uuid="GPU-h200-a-0")
    tick(gpu, sim_of(gpu, "xid:79"))
    verdicts.evaluate()
    from monitoring import exposition

    text = exposition.render()
    [line] = [x for x in text.splitlines() if x.startswith("gpuconsole_gpu_health{") and 'UUID="GPU-h200-a-0"' in x]
    assert line.endswith(" 2")
    assert any(x.startswith("gpuconsole_gpu_cordoned{") and x.endswith(" 1") for x in text.splitlines())
    assert "gpuconsole_gpu_health" not in exposition.render(teams=[acme.pk])
