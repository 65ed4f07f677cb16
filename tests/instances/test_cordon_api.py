from audit.models import AuditEvent
from instances.models import Gpu, Host


def test_an_operator_cordons_and_uncordons_a_host(api, ops, fleet):
    pk = fleet["hosts"]["h100-a"].pk
    response = api(ops).post(f"/api/v1/hosts/{pk}/cordon/", {"reason": "PSU swap"}, format="json")
    assert response.status_code == 200 and response.json()["cordoned"] is True
    assert Host.objects.get(pk=pk).cordon_reason == "PSU swap"
    assert api(ops).post(f"/api/v1/hosts/{pk}/uncordon/").json()["cordoned"] is False


def test_a_gpu_cordon_names_its_reason(api, ops, fleet):
    response = api(ops).post("/api/v1/gpus/GPU-h100-a-2/cordon/", {"reason": "XID 48"}, format="json")
    assert response.json()["cordon_reason"] == "XID 48"
    assert Gpu.objects.get(uuid="GPU-h100-a-2").cordoned_at is not None


def test_a_bad_reason_is_a_named_400_and_nothing_changes(api, ops, fleet):
    pk = fleet["hosts"]["h100-a"].pk
    response = api(ops).post(f"/api/v1/hosts/{pk}/cordon/", {"reason": "x" * 400}, format="json")
    assert response.status_code == 400 and "reason" in response.json()
    assert Host.objects.get(pk=pk).cordoned_at is None
    assert not AuditEvent.objects.filter(action="host.cordon").exists()


def test_drain_answers_what_it_preempted_and_what_to_move(api, ops, bob, acme, launch, fleet):
    from instances import lifecycle

    spot = lifecycle.mark_running(instance=launch(bob, acme, name="cheap", model="H200-141GB", pricing="spot"))
    body = api(ops).post(f"/api/v1/hosts/{fleet['hosts']['h200-a'].pk}/drain/", {"notice_seconds": 60},
                         format="json").json()
    assert [i["name"] for i in body["preempted"]] == [spot.name]
    assert body["to_move"] == [] and body["cordoned"] is True


def test_an_unknown_gpu_is_404(api, ops, fleet):
    assert api(ops).post("/api/v1/gpus/GPU-nope/cordon/").status_code == 404
