"""Idle-but-billed alerts from the recorded H200 trace: the held allocation (100 GB in
use, nothing computing) raises one; the memory copy (100% utilization, 0% tensor) does not."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Q

from agent.protocol import METRICS
from alerting import alerts, periodic, services
from alerting.models import Alert, AlertKind, AlertRule
from instances import lifecycle as instance_lifecycle
from monitoring import ingest
from monitoring.frames import Metrics, Record, Samples

WINDOW_S = 5


@pytest.fixture
def replayed(trace_lines, launch, bob, acme):
    """The trace stored as the H200 of an Acme instance that ran since before it."""
    _, lines = trace_lines
    began = datetime.fromtimestamp(lines[0]["t"], tz=UTC) - timedelta(hours=1)
    instance = launch(bob, acme, name="finetune", model="H200-141GB", at=began)
    instance_lifecycle.mark_running(instance=instance, at=began)
    AlertRule.objects.filter(metric="idle_billed").update(enabled=False)
    services.create_rule(actor=bob, team=acme, name="idle 5 s", metric="idle_billed", comparison="<", threshold=10,
                         hold_s=WINDOW_S)
    gpu = instance.gpus.get()
    records = [
        Record(seq=i + 1, t=line["t"], gpu=gpu.uuid, slice=None, m=Metrics(**{k: v for k, v in line.items() if k in METRICS}))
        for i, line in enumerate(lines)
    ]
    link = ingest.Link(gpu.host_id, gpu.host.name)
    for at in range(0, len(records), 500):
        ingest.store(link=link, batches=[Samples(boot_id="ab" * 16, records=records[at:at + 500])])
    return instance, lines


def idle_phases(lines) -> set[str]:
    """The phases during which an idle alert was open, evaluating once a second."""
    seen = set()
    start, end = lines[0]["t"] + WINDOW_S, lines[-1]["t"]
    for step in range(int(end - start) + 1):
        now = start + step
        moment = datetime.fromtimestamp(now, tz=UTC)
        for rule, found in periodic.idle_conditions(moment):
            alerts.reconcile(AlertKind.IDLE, found, now=moment, scope=Q(rule=rule))
        if Alert.objects.filter(kind=AlertKind.IDLE, state="open").exists():
            seen.add(next(line["phase"] for line in reversed(lines) if line["t"] <= now))
    return seen


def test_the_held_allocation_raises_an_idle_alert(replayed):
    instance, lines = replayed
    phases = idle_phases(lines)
    assert "hold" in phases
    alert = Alert.objects.filter(kind=AlertKind.IDLE).latest("opened_at")
    assert (alert.instance_id, alert.team_id) == (instance.pk, instance.team_id)
    assert "finetune" in alert.message


def test_the_memory_copy_raises_none(replayed):
    _, lines = replayed
    phases = idle_phases(lines)
    assert "copy" not in phases


def test_an_idle_alert_resolves_when_work_starts(replayed):
    _, lines = replayed
    idle_phases(lines)
    resolved = Alert.objects.filter(kind=AlertKind.IDLE, state="resolved").order_by("opened_at").first()
    phase_at = next(line["phase"] for line in reversed(lines) if line["t"] <= resolved.resolved_at.timestamp())
    assert phase_at == "matmul"
