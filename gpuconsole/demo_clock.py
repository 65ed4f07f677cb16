"""The demo played forward: what ``make run``'s scheduler does while the demo runs
(spot market steps, max-price notices, preemptions, queue passes, scaling decisions on
the team's pushed queue depth, provisioning, failing boots never confirmed, metering), at chosen times rather than the
wall clock's. ``advance`` plays [start, end) one tick at a time, so a test (or a demo
that should look as if it has run for an hour) sees the state an hour of running leaves."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from billing import meter_runs as billing_meter_runs
from billing import price_changes as billing_price_changes
from console.request_context import recorded_at
from instances import lifecycle as instance_lifecycle
from instances import preemption as instance_preemption
from instances.models import Instance, State
from jobs import scheduler as job_scheduler
from scaling import alerting
from scaling import demo as scaling_demo
from scaling import services as scaling_services
from scaling.models import MetricSource, ScalingGroup

TICK = timedelta(minutes=1)
STARTUP = timedelta(seconds=60)  # a launched instance is running this long after its launch
SPOT_STEP = timedelta(minutes=15)
METER_STEP = timedelta(minutes=5)


@dataclass
class Played:
    ticks: int = 0
    launched: int = 0
    preempted: int = 0
    started_jobs: int = 0
    scaling_changes: int = 0
    failed: int = 0


def advance(*, start: datetime, end: datetime, tick: timedelta = TICK, seed: int = 29) -> Played:
    """Play the demo's periodic work from ``start`` to ``end``, one ``tick`` at a time."""
    rng = random.Random(seed)
    played = Played()
    t = start
    while t < end:
        with recorded_at(t):  # its audit events carry the tick's time; the queue is not kicked at today's
            _tick(t, start, played, rng)
        t += tick
        played.ticks += 1
    with recorded_at(end):
        billing_meter_runs.meter_recent(now=end)
    return played


def _tick(t: datetime, start: datetime, played: Played, rng: random.Random) -> None:
    if (t - start) % SPOT_STEP < TICK:
        with transaction.atomic():
            billing_price_changes.move_spot_market(now=t, rng=rng)
    instance_preemption.enforce_max_prices(now=t)
    played.preempted += len(instance_preemption.preempt_due(now=t))
    played.started_jobs += len(job_scheduler.run_queue(now=t, provision=False).started)
    _push_depths(t, start)
    # As evaluate_all does, but new instances boot in _provision at the tick's time.
    decisions = [scaling_services.evaluate_group(group, now=t, provision=False)
                 for group in ScalingGroup.objects.live().order_by("pk")]
    alerting.reconcile(decisions, now=t)
    played.scaling_changes += sum(d.changed for d in decisions)
    played.launched += _provision(t)
    played.failed += len(instance_lifecycle.fail_overdue(now=t))
    if (t - start) % METER_STEP < TICK:
        billing_meter_runs.meter_recent(now=t)


def _push_depths(t: datetime, start: datetime) -> None:
    """The demo team's queue depth, its story replayed from the start."""
    minute = int((t - start).total_seconds() // 60) % (scaling_demo.MINUTES + 1)
    for group in ScalingGroup.objects.live().filter(metric_source=MetricSource.PUSHED):
        scaling_services.push_queue_depth(group=group, queue_depth=scaling_demo.queue_depth(minute), now=t)


def _provision(t: datetime) -> int:
    """What the provisioning task does: an instance launched at least a minute ago runs.
    The demo's one instance whose host never confirms the boot (``acme-new-job``) stays
    pending: stuck after PENDING_GRACE_SECONDS, failed after PENDING_FAIL_SECONDS."""
    booted = 0
    due = Instance.objects.filter(state=State.PENDING, state_changed_at__lte=t - STARTUP).exclude(name="acme-new-job")
    for instance in due.order_by("state_changed_at", "pk"):
        instance_lifecycle.mark_running(instance=instance, at=instance.state_changed_at + STARTUP)
        booted += 1
    return booted
