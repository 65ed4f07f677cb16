"""A demo scaling group: Acme's batch workers (1 × H100 each, spot while it costs at most
a little above its price when the history starts, else on-demand), with the last two and a half hours of queue depth played
through the real evaluation minute by minute: it grows to its maximum, waits there
(the alert opens), shrinks after its cooldown and settles. Idempotent."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from console.models import Team
from console.request_context import recorded_at
from instances import catalog
from instances import lifecycle as instance_lifecycle
from instances.models import GpuModel, State

from . import alerting, services
from .models import ScalingGroup

NAME = "acme-batch-workers"
MINUTES = 150
STARTUP = timedelta(seconds=60)  # a launched instance runs after this


def queue_depth(minute: int) -> int:
    """Queued items over the demo's history: quiet, a burst above what the maximum
    works through, a drain to empty, then a little work again."""
    if minute < 20:
        return 8
    if minute < 40:
        return 8 + (minute - 20) * 5
    if minute < 70:
        return 120
    if minute < 90:
        return max(0, 120 - (minute - 70) * 6)
    if minute < 120:
        return 0
    return 25


def seed(*, users, stdout=None) -> None:
    team = Team.objects.get(name="Acme")
    if ScalingGroup.objects.live().filter(team=team, name=NAME).exists():
        return
    now = timezone.now().replace(second=0, microsecond=0)
    start = now - timedelta(minutes=MINUTES)
    with transaction.atomic():
        with recorded_at(start):
            group = services.create_group(
                actor=users["alice"], team=team, name=NAME, now=start, gpu_model=GpuModel.objects.get(name="H100-80GB"),
                gpus_per_instance=1, pricing_model="spot", max_price=_max_price(start), min_instances=1, max_instances=4,
                target_per_instance=20, scale_out_cooldown_s=120, scale_in_cooldown_s=300,
            )
        for minute in range(MINUTES + 1):
            t = start + timedelta(minutes=minute)
            _walk(group, t)
            with recorded_at(t):
                services.push_queue_depth(group=group, queue_depth=queue_depth(minute), now=t)
                decision = services.evaluate_group(group, now=t, provision=False)
                alerting.reconcile_group(decision, now=t)


def _max_price(at) -> Decimal:
    """Five cents above the H100 spot price at ``at``: spot while the market stays
    near it, on-demand when it climbs."""
    quote = catalog.quote(sku="H100-80GB", pricing_model="spot", count=1, team_id=None, at=at)
    spot = getattr(quote, "per_gpu_hour", None) or Decimal("1.50")
    return (spot + Decimal("0.05")).quantize(Decimal("0.01"))


def _walk(group: ScalingGroup, t) -> None:
    """What the platform's provisioning task does, at the demo's times."""
    members = group.members.select_related("instance")
    for member in members.filter(instance__state=State.PENDING, instance__state_changed_at__lte=t - STARTUP):
        with recorded_at(member.instance.state_changed_at + STARTUP):
            instance_lifecycle.mark_running(instance=member.instance, at=member.instance.state_changed_at + STARTUP)
