"""An operator finds a failing GPU from the fleet page, reads why, collects the host's
diagnostics and cordons; a tenant sees none of it."""

import pytest
from health_sim import sim_of, tick

from audit.models import AuditEvent
from instances.models import Gpu, Host
from monitoring import verdicts


@pytest.fixture
def failing(fleet):
    gpu = Gpu.objects.select_related("host").get(uuid="GPU-h100-a-3")
    tick(gpu, sim_of(gpu, "xid:79"))
    verdicts.evaluate()
    return gpu


def test_the_fleet_page_shows_the_failing_host_and_why(client, ops, failing):
    client.force_login(ops)
    page = client.get("/").content.decode()
    assert "health-failed" in page
    assert "GPU 3: XID 79: GPU has fallen off the bus" in page


def test_the_host_page_says_why_and_what_to_do(client, ops, failing):
    client.force_login(ops)
    page = client.get(f"/hosts/{failing.host_id}/").content.decode()
    assert "XID 79: GPU has fallen off the bus" in page
    assert "drain the host and reboot it" in page
    assert "Collect diagnostics" in page and "cordoned" in page


def test_the_gpu_page_shows_its_verdict(client, ops, failing):
    client.force_login(ops)
    page = client.get(f"/gpus/{failing.uuid}/").content.decode()
    assert "health-failed" in page and "fallen off the bus" in page


def test_the_hosts_list_counts_failed_and_cordoned_gpus(client, ops, failing):
    client.force_login(ops)
    page = client.get("/hosts/").content.decode()
    assert "1 failed" in page and "1 GPU cordoned" in page


def test_collect_from_the_page_is_audited_and_listed(client, ops, failing):
    client.force_login(ops)
    response = client.post(f"/hosts/{failing.host_id}/diagnostics/collect/")
    assert response.status_code == 302
    assert AuditEvent.objects.filter(action="host.diagnostics.collect").count() == 1
    assert "requested" in client.get(f"/hosts/{failing.host_id}/").content.decode()


def test_cordon_and_drain_from_the_page(client, ops, fleet):
    client.force_login(ops)
    pk = fleet["hosts"]["h100-b"].pk
    client.post(f"/hosts/{pk}/placement/cordon/", {"reason": "fans"})
    assert Host.objects.get(pk=pk).cordon_reason == "fans"
    client.post(f"/hosts/{pk}/placement/uncordon/")
    client.post(f"/hosts/{pk}/placement/drain/")
    assert Host.objects.get(pk=pk).cordon_reason == "host maintenance"


def test_an_unknown_page_action_changes_nothing(client, ops, fleet):
    client.force_login(ops)
    client.post(f"/hosts/{fleet['hosts']['h100-b'].pk}/placement/melt/")
    client.post("/gpus/GPU-h100-b-0/placement/drain/")
    assert not AuditEvent.objects.filter(action__in=["host.cordon", "gpu.cordon", "host.drain"]).exists()


@pytest.mark.parametrize("who", ["alice", "bob", "audrey"])
def test_tenants_cannot_use_the_health_pages(who, request, client, failing):
    client.force_login(request.getfixturevalue(who))
    assert client.get(f"/hosts/{failing.host_id}/").status_code == 403
    assert client.post(f"/hosts/{failing.host_id}/diagnostics/collect/").status_code == 403
    assert client.post(f"/gpus/{failing.uuid}/placement/uncordon/").status_code == 403
    assert Gpu.objects.get(pk=failing.pk).cordoned_at is not None
