"""The precision is history: each reading's TFLOP/s estimate uses the precision in force
at its time, and a new precision never rewrites a past window."""

from datetime import timedelta

import pytest
from django.utils import timezone
from telemetry_wire import add_samples

from audit.models import AuditEvent
from instances import lifecycle as instance_lifecycle
from instances import transitions as instance_transitions
from instances.models import PrecisionPeriod, PrecisionSource

BUSY = {"tensor_active_pct": 50.0, "sm_clock_mhz": 1980}
BF16 = pytest.approx(0.5 * 989.4 * 0.98, abs=0.01)
TF32 = pytest.approx(0.5 * 494.7 * 0.98, abs=0.01)


@pytest.fixture
def gpu(acme_instance):
    return acme_instance.gpus.order_by("index").first()


@pytest.fixture
def changed(acme_instance, gpu, bob):
    """Three bf16 readings, then the team sets tf32, then two more readings."""
    past = timezone.now() - timedelta(minutes=5)
    add_samples(gpu, past, [BUSY] * 3, instance=acme_instance, step=timedelta(seconds=10))
    at = timezone.now()
    instance_lifecycle.set_precision(actor=bob, instance=acme_instance, precision="tf32", at=at)
    add_samples(gpu, at + timedelta(seconds=1), [BUSY] * 2, instance=acme_instance, step=timedelta(seconds=10))
    return past, at


def read(api, user, path, start, end):
    params = {"metric": "tflops_est", "start": start.isoformat(), "end": end.isoformat()}
    response = api(user).get(path, params)
    assert response.status_code == 200, response.content
    return response.json()


def test_an_old_window_keeps_the_precision_of_its_time(api, bob, acme_instance, gpu, changed):
    past, at = changed
    body = read(api, bob, f"/api/v1/instances/{acme_instance.pk}/metrics/", past - timedelta(seconds=1), at)
    assert body["gpus"][gpu.uuid]["tflops_est"]["avg"] == [BF16] * 3
    assert body["tflops_basis"][gpu.uuid]["precision"] == "bf16"
    assert body["precision"] == "tf32"


def test_a_window_across_the_change_reads_each_reading_at_its_precision(api, bob, acme_instance, gpu, changed):
    past, at = changed
    body = read(api, bob, f"/api/v1/instances/{acme_instance.pk}/metrics/", past - timedelta(seconds=1),
                at + timedelta(minutes=1))
    assert body["gpus"][gpu.uuid]["tflops_est"]["avg"] == [BF16] * 3 + [TF32] * 2
    assert [b["precision"] for b in body["tflops_bases"][gpu.uuid]] == ["bf16", "tf32"]


def test_the_gpus_own_series_reads_the_same_history(api, bob, gpu, changed):
    past, at = changed
    body = read(api, bob, f"/api/v1/gpus/{gpu.uuid}/metrics/", past - timedelta(seconds=1), at + timedelta(minutes=1))
    assert body["series"]["tflops_est"]["avg"] == [BF16] * 3 + [TF32] * 2
    assert body["tflops_basis"]["precision"] == "tf32"


def test_another_team_reads_nothing_of_it(api, charlie, acme_instance, changed):
    past, at = changed
    response = api(charlie).get(f"/api/v1/instances/{acme_instance.pk}/metrics/", {"metric": "tflops_est"})
    assert response.status_code == 404


def test_each_period_says_who_declared_it(bob, acme_instance):
    at = timezone.now()
    instance_lifecycle.set_precision(actor=bob, instance=acme_instance, precision="fp8", at=at)
    instance_lifecycle.set_precision(actor="agent", instance=acme_instance, precision="fp8",
                                    source=PrecisionSource.WORKLOAD, at=at + timedelta(seconds=5))
    periods = list(PrecisionPeriod.objects.filter(instance=acme_instance).values_list("precision", "source", "end"))
    assert periods == [("bf16", "default", at), ("fp8", "team", at + timedelta(seconds=5)), ("fp8", "workload", None)]
    assert list(AuditEvent.objects.filter(action="instance.precision").values_list("details__source", flat=True)) \
        == ["team", "workload"]


def test_the_same_declaration_again_changes_nothing(bob, acme_instance):
    for _ in range(2):
        instance_lifecycle.set_precision(actor="agent", instance=acme_instance, precision="bf16",
                                        source=PrecisionSource.WORKLOAD)
    assert PrecisionPeriod.objects.filter(instance=acme_instance).count() == 2
    assert AuditEvent.objects.filter(action="instance.precision").count() == 1


def test_a_change_dated_before_the_period_in_force_is_refused(bob, acme_instance):
    at = timezone.now()
    instance_lifecycle.set_precision(actor=bob, instance=acme_instance, precision="tf32", at=at)
    with pytest.raises(instance_transitions.LifecycleError, match="must come after"):
        instance_lifecycle.set_precision(actor=bob, instance=acme_instance, precision="fp16",
                                        at=at - timedelta(seconds=1))
    acme_instance.refresh_from_db()
    assert acme_instance.precision == "tf32"
    assert PrecisionPeriod.objects.filter(instance=acme_instance).count() == 2


def test_an_unknown_source_is_refused(bob, acme_instance):
    with pytest.raises(instance_transitions.LifecycleError, match="precision source"):
        instance_lifecycle.set_precision(actor=bob, instance=acme_instance, precision="fp16", source="rumour")
    assert not PrecisionPeriod.objects.exists()


def test_the_instance_page_says_whether_the_precision_is_the_workloads(bob, acme_instance):
    from django.test import Client

    client = Client()
    client.force_login(bob)
    page = client.get(f"/instances/{acme_instance.pk}/").content.decode()
    assert "assume <strong>bf16</strong>, the default and not declared by the workload" in page
    assert "GPUCONSOLE_PRECISION" in page
    instance_lifecycle.set_precision(actor="agent", instance=acme_instance, precision="tf32",
                                    source=PrecisionSource.WORKLOAD)
    page = client.get(f"/instances/{acme_instance.pk}/").content.decode()
    assert "assume <strong>tf32</strong>, declared by the workload." in page
