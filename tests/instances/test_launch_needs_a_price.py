from audit.models import AuditEvent
from billing.models import Price, SpotPrice
from instances import catalog, lifecycle
from instances.models import GpuModel, Instance
from monitoring.inventory import gpu_model_for


def _body(team, model="H100-80GB", pricing="on_demand"):
    return {"team": team.pk, "name": "job", "gpu_model": model, "gpu_count": 1, "pricing_model": pricing}


def test_a_sku_with_no_price_answers_409_no_price(api, bob, acme, fleet):
    Price.objects.filter(sku="H100-80GB").delete()
    response = api(bob).post("/api/v1/instances/", _body(acme))
    assert response.status_code == 409
    assert response.json()["code"] == "no_price" and "H100-80GB" in response.json()["detail"]
    assert not Instance.objects.exists()


def test_spot_needs_a_spot_price(api, bob, acme, fleet):
    SpotPrice.objects.filter(sku="H100-80GB").delete()
    assert api(bob).post("/api/v1/instances/", _body(acme, pricing="spot")).json()["code"] == "no_price"
    assert api(bob).post("/api/v1/instances/", _body(acme)).status_code == 201


def test_a_stopped_instance_of_an_unpriced_sku_cannot_start(launch, bob, acme):
    job = launch(bob, acme)
    lifecycle.mark_running(instance=job)
    lifecycle.stop_instance(actor=bob, instance=job, finish=False)
    lifecycle.finish_stop(instance=job)
    Price.objects.filter(sku="H100-80GB").delete()
    try:
        lifecycle.start_instance(actor=bob, instance=job, provision=False)
    except lifecycle.NoPriceError as exc:
        assert exc.code == "no_price"
    else:
        raise AssertionError("an unpriced SKU started")


def test_a_gpu_model_the_agent_reports_is_registered_audited_and_unpriced(fleet, acme, bob):
    host = fleet["hosts"]["h100-a"]
    model = gpu_model_for("NVIDIA B200", 192 * 2**30, 1_000_000, actor=host)
    assert model.name == "B200-192GB" and model.power_limit_w == 1000
    event = AuditEvent.objects.get(action="gpu_model.register")
    assert event.details["reported_as"] == "NVIDIA B200" and event.details["priced"] is False
    assert GpuModel.objects.filter(name="B200-192GB").count() == 1
    assert catalog.missing_price(sku="B200-192GB", pricing_model="on_demand", at=event.time)
