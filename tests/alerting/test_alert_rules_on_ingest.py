"""Rules on fast metrics are evaluated as readings are stored: the condition must hold
on every reading for the hold time; alerts belong to the GPU's holder at that time."""

from datetime import UTC, datetime, timedelta

import pytest
from alert_support import Feed, active
from django.utils import timezone

from alerting import services
from alerting.models import Alert, AlertRule
from audit.models import AuditEvent
from instances import lifecycle as instance_lifecycle
from instances.models import GpuHold


@pytest.fixture
def acme_instance(launch, bob, acme):
    """Running since an hour ago, so readings of the last minutes are the instance's."""
    began = timezone.now() - timedelta(hours=1)
    instance = instance_lifecycle.mark_running(instance=launch(bob, acme, name="acme-train", count=2, at=began),
                                              at=began)
    return instance


@pytest.fixture
def gpu(acme_instance):
    return acme_instance.gpus.order_by("index").first()


@pytest.fixture
def feed(gpu):
    return Feed(gpu.host)


def temp_rule(team):
    return AlertRule.objects.get(team=team, metric="temp_c")


def test_every_team_starts_with_the_default_rules(acme, globex):
    names = set(AlertRule.objects.filter(team=acme).values_list("metric", flat=True))
    assert names == {"throttle_power", "temp_c", "xid", "ecc_uncorrected", "agent_silent", "idle_billed", "spot_vs_max"}
    assert AlertRule.objects.filter(team=globex, default=True).count() == 7


def test_a_condition_shorter_than_the_hold_time_opens_nothing(feed, gpu, acme):
    t0 = start()
    feed.readings(gpu, t0, [{"temp_c": 91}] * 30)
    assert active(rule=temp_rule(acme)) == []


def test_a_condition_held_for_the_hold_time_opens_one_alert_for_the_holder(feed, gpu, acme, acme_instance):
    t0 = start()
    feed.readings(gpu, t0, [{"temp_c": 91}] * 62)
    [alert] = active(rule=temp_rule(acme))
    assert (alert.team_id, alert.instance_id, alert.uuid, alert.kind) == (acme.pk, acme_instance.pk, gpu.uuid, "temperature")
    assert AuditEvent.objects.filter(action="alert.open", target_id=str(alert.pk)).exists()


def test_one_cool_reading_restarts_the_hold_time(feed, gpu, acme):
    t0 = start()
    feed.readings(gpu, t0, [{"temp_c": 91}] * 40 + [{"temp_c": 70}] + [{"temp_c": 91}] * 40)
    assert active(rule=temp_rule(acme)) == []


def test_it_resolves_once_clear_for_the_hold_time(feed, gpu, acme):
    t0 = start()
    feed.readings(gpu, t0, [{"temp_c": 91}] * 61)
    feed.readings(gpu, t0 + 61, [{"temp_c": 70}] * 30)
    assert len(active(rule=temp_rule(acme))) == 1
    feed.readings(gpu, t0 + 91, [{"temp_c": 70}] * 31)
    assert active(rule=temp_rule(acme)) == []
    assert Alert.objects.get(rule=temp_rule(acme)).state == "resolved"


def test_another_teams_rule_never_watches_your_gpus(feed, gpu, globex):
    feed.readings(gpu, start(), [{"temp_c": 91}] * 62)
    assert active(rule=temp_rule(globex)) == []


def test_an_operators_host_rule_watches_that_host_for_operators(feed, gpu, ops, fleet):
    rule = services.create_rule(actor=ops, name="hot h100-a", metric="gpu_util", threshold=90, hold_s=5,
                                host=fleet["hosts"]["h100-a"])
    services.create_rule(actor=ops, name="hot h100-b", metric="gpu_util", threshold=90, hold_s=5,
                         host=fleet["hosts"]["h100-b"])
    feed.readings(gpu, start(), [{"gpu_util": 97}] * 7)
    [alert] = active(rule__team__isnull=True, kind="utilization")
    assert alert.rule == rule and alert.team_id is None and alert.severity == "warning"


def test_a_handover_opens_a_new_alert_for_the_new_tenant(feed, gpu, acme, acme_instance, globex_instance, ops):
    rule = services.create_rule(actor=ops, name="fleet hot", metric="temp_c", threshold=85, hold_s=2)
    t0 = start()
    feed.readings(gpu, t0, [{"temp_c": 91}] * 3)
    [before] = active(rule=rule)
    handover = datetime.fromtimestamp(t0 + 3, tz=UTC)
    GpuHold.objects.filter(gpu=gpu, end__isnull=True).update(end=handover)
    GpuHold.objects.create(gpu=gpu, instance=globex_instance, team=globex_instance.team, start=handover)
    feed.readings(gpu, t0 + 3, [{"temp_c": 91}] * 3)
    [after] = active(rule=rule)
    assert (before.instance_id, after.instance_id) == (acme_instance.pk, globex_instance.pk)
    assert Alert.objects.get(pk=before.pk).state == "resolved"


def test_an_xid_opens_an_alert_per_code_for_the_team_and_the_operators(feed, gpu, acme):
    feed.event(gpu, start(), kind="xid", code=79, message="fell off the bus")
    feed.event(gpu, start(), kind="xid", code=79, message="again")
    team = active(rule__team=acme, kind="xid")
    assert len(team) == 1 and team[0].count == 2 and "fell off the bus" not in team[0].message
    assert active(rule__team__isnull=True, kind="xid")[0].value == 79


def start() -> float:
    return timezone.now().timestamp() - 600


def test_a_tflops_rule_reads_the_estimate_at_the_instances_precision(feed, gpu, acme, alice):
    rule = services.create_rule(actor=alice, team=acme, name="slow training", metric="tflops_est", comparison="<",
                                threshold=100, hold_s=3)
    # 5% tensor activity at the top clock of an H100: 0.05 × 989.4 × 0.98 ≈ 48.5 TFLOP/s.
    feed.readings(gpu, start(), [{"tensor_active_pct": 5, "sm_clock_mhz": 1980}] * 5)
    [alert] = active(rule=rule)
    assert alert.value == pytest.approx(48.48, abs=0.1)
