"""Health facts and XID errors from a simulated agent, judged by the periodic evaluation."""

from datetime import timedelta

from django.utils import timezone
from health_sim import sim_of, tick

from alerting.models import Alert, AlertKind
from audit.models import AuditEvent
from instances import placement
from instances.models import Gpu
from monitoring import verdicts
from monitoring.models import GpuEvent, GpuHealth


def _h200():
    return Gpu.objects.select_related("host").get(uuid="GPU-h200-a-0")


def test_a_gpu_fallen_off_the_bus_fails_is_alerted_and_cordoned(fleet):
    gpu = _h200()
    tick(gpu, sim_of(gpu, "xid:79"))
    verdicts.evaluate()
    row = GpuHealth.objects.get(gpu=gpu)
    assert row.state == "failed"
    assert "XID 79: GPU has fallen off the bus" in row.summary
    alert = Alert.objects.get(kind=AlertKind.GPU_HEALTH)
    assert alert.severity == "critical" and alert.team_id is None
    assert "GPU 0 of h200-a is failed" in alert.message
    assert _h200().cordoned_at is not None
    assert placement.free_capacity(gpu_model=fleet["h200"]) == (0, 0)


def test_auto_cordon_can_be_turned_off(fleet, settings):
    settings.HEALTH_AUTO_CORDON = False
    gpu = _h200()
    tick(gpu, sim_of(gpu, "xid:48"))
    verdicts.evaluate()
    assert GpuHealth.objects.get(gpu=gpu).state == "failed"
    assert _h200().cordoned_at is None


def test_facts_on_the_wire_degrade_and_recover_with_the_alert(fleet):
    gpu = _h200()
    sim = sim_of(gpu, "remap_pending")
    tick(gpu, sim)
    verdicts.evaluate()
    assert GpuHealth.objects.get(gpu=gpu).state == "degraded"
    sim.fleet[0].gpus[0].set_fault("none")
    tick(gpu, sim)
    verdicts.evaluate()
    assert GpuHealth.objects.get(gpu=gpu).state == "healthy"
    assert Alert.objects.get(kind=AlertKind.GPU_HEALTH).state == "resolved"
    assert _h200().cordoned_at is None


def test_each_change_of_state_is_audited_once(fleet):
    gpu = _h200()
    tick(gpu, sim_of(gpu, "nvlink_down"))
    verdicts.evaluate()
    verdicts.evaluate()
    event = AuditEvent.objects.get(action="gpu.health")
    assert event.details["to"] == "degraded" and "NVLink" in event.details["why"]


def test_a_thermal_slowdown_held_for_minutes_degrades(fleet):
    gpu = _h200()
    sim = sim_of(gpu, "thermal")
    start = timezone.now()
    tick(gpu, sim)
    verdicts.evaluate(now=start)
    assert GpuHealth.objects.get(gpu=gpu).state == "healthy"
    tick(gpu, sim)
    verdicts.evaluate(now=start + timedelta(minutes=6))
    assert "thermal slowdown for 6 min" in GpuHealth.objects.get(gpu=gpu).summary


def test_the_host_verdict_names_its_failing_gpu(fleet):
    gpu = Gpu.objects.select_related("host").get(uuid="GPU-h100-a-3")
    tick(gpu, sim_of(gpu, "xid:95"))
    verdicts.evaluate()
    verdict = verdicts.host_verdicts([gpu.host])[gpu.host_id]
    assert verdict.state == "failed"
    assert verdict.summary.startswith("GPU 3: XID 95")


def test_an_evaluation_with_nothing_changed_writes_nothing(fleet, django_assert_max_num_queries):
    verdicts.evaluate()
    with django_assert_max_num_queries(6):
        assert verdicts.evaluate() == []


def test_an_operator_may_uncordon_a_failed_gpu_and_it_stays_so(fleet, ops):
    from instances import cordon

    gpu = _h200()
    sim = sim_of(gpu, "xid:79")
    tick(gpu, sim)
    verdicts.evaluate()
    cordon.uncordon_gpu(actor=ops, gpu=_h200())
    sim.fleet[0].gpus[0].set_fault("xid:79")
    tick(gpu, sim)  # a second XID 79: the same state, other words
    verdicts.evaluate()
    assert "2 times" in GpuHealth.objects.get(gpu=gpu).summary
    assert _h200().cordoned_at is None


def test_a_stored_xid_without_its_code_does_not_stop_the_fleets_evaluation(fleet):
    """Agents must send an XID's code (the server now refuses one without); a row stored
    without one before is left out of the verdict rather than breaking every evaluation."""
    gpu = _h200()
    GpuEvent.objects.create(kind="xid", host=gpu.host, gpu=gpu, uuid=gpu.uuid, code=None, message="no code")
    tick(gpu, sim_of(gpu, "xid:79"))
    verdicts.evaluate()
    assert GpuHealth.objects.get(gpu=gpu).state == "failed"
