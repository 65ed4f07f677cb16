"""Spot preemption: capacity reclaimed for paying launches, notices before a preemption
(and when the spot price passes an instance's max price), and the preemptions that
fall due."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agent.protocol import LivePreemption
from audit.models import Outcome
from audit.recording import record_event
from console.validators import ascii_decimal

from . import catalog
from .models import (
    PREEMPTIBLE,
    Gpu,
    GpuModel,
    HostKind,
    HostState,
    Instance,
    NoticeStatus,
    PreemptionNotice,
    PricingModel,
    Region,
    State,
)
from .placement import nvlink_pools, release_gpus
from .transitions import LifecycleError, change_time, locked, transition

MAX_PRICE_CEILING = 100
_MAX_PRICE_LIMIT = Decimal("100000000")  # what the column holds, where no on-demand price is known



@transaction.atomic
def reclaim_spot_capacity(*, gpu_model: GpuModel, count: int, region: Region | None = None) -> list[Instance]:
    """Give notice to the fewest running preemptible instances (spot, and low-priority
    jobs in idle capacity, those first) in one NVLink group (one host where the host has
    no groups) whose GPUs, with the group's free ones, make room for ``count`` GPUs.
    Returns the instances given notice.

    Runs under the model's placement lock, and counts GPUs already under notice as room
    coming free: two launches short of capacity at once never both preempt for it."""
    GpuModel.objects.select_for_update().get(pk=gpu_model.pk)
    gpus = Gpu.objects.filter(model=gpu_model, host__state=HostState.ACTIVE, host__kind=HostKind.PASSTHROUGH)
    if region is not None:
        gpus = gpus.filter(host__region=region)
    pools = nvlink_pools(list(gpus.select_related("host").order_by("host__name", "index")))
    held = {g.instance_id for pool in pools.values() for g in pool if g.instance_id}
    spot = {i.pk: i for i in Instance.objects.filter(
        pk__in=held, state=State.RUNNING, pricing_model__in=PREEMPTIBLE, slice_profile=None).select_related("host")}
    noticed = set(PreemptionNotice.objects.filter(instance__in=list(spot), status=NoticeStatus.PENDING)
                  .values_list("instance_id", flat=True))
    best: list[Instance] | None = None
    # Room is counted per NVLink group (a host without groups is one): freeing GPUs in
    # two groups never makes room for an instance that needs them in one.
    for pool in pools.values():
        holders: dict[int | None, int] = {}
        for g in pool:
            holders[g.instance_id] = holders.get(g.instance_id, 0) + 1
        room = holders.get(None, 0) + sum(n for pk, n in holders.items() if pk in noticed)
        if room >= count:
            return []  # room is already on its way: launching again once it frees will fit
        chosen = []
        for candidate in sorted((spot[pk] for pk in holders if pk in spot and pk not in noticed),
                                key=lambda i: (i.pricing_model != PricingModel.IDLE, -i.gpu_count, i.created_at)):
            if room >= count:
                break
            chosen.append(candidate)
            room += holders[candidate.pk]
        if room >= count and chosen and (best is None or len(chosen) < len(best)):
            best = chosen
    for instance in best or []:
        issue_preemption_notice(actor="system", instance=instance, reason=f"capacity needed for {count} × {gpu_model.name}")
    return best or []


@transaction.atomic
def preempt_instance(
    *, actor="system", instance: Instance, reason: str = "capacity reclaimed", at: datetime | None = None
) -> Instance:
    instance = locked(instance)
    if instance.pricing_model not in PREEMPTIBLE:
        raise LifecycleError(f"Instance {instance.name} is {instance.get_pricing_model_display()}; only spot instances "
                             "and low-priority jobs are preempted.")
    at = change_time(instance, at)
    release_gpus(instance, at)
    return transition(
        instance, State.PREEMPTED, actor=actor, action="instance.preempt", reason=reason, by_platform=True, at=at
    )


DEFAULT_NOTICE = timedelta(minutes=2)


@transaction.atomic
def issue_preemption_notice(*, actor, instance: Instance, notice: timedelta = DEFAULT_NOTICE, reason: str = "",
                            now: datetime | None = None) -> PreemptionNotice:
    """Warn a spot instance's (or a low-priority job's) team that the platform takes it
    back at now + notice."""
    from console.live import publish_on_commit, team_group

    now = now or timezone.now()
    if not timedelta(0) <= notice <= timedelta(hours=1):
        raise ValidationError({"notice_seconds": "The notice is between 0 seconds and one hour."})
    instance = locked(instance)
    if instance.pricing_model not in PREEMPTIBLE:
        raise LifecycleError(f"Instance {instance.name} is {instance.get_pricing_model_display()}; only spot instances "
                             "and low-priority jobs are preempted.")
    if instance.state != State.RUNNING:
        raise LifecycleError(f"Instance {instance.name} is {instance.state}; only a running instance can be preempted.")
    if PreemptionNotice.objects.filter(instance=instance, status=NoticeStatus.PENDING).exists():
        raise LifecycleError(f"Instance {instance.name} already has a pending preemption notice.")
    item = PreemptionNotice.objects.create(instance=instance, team_id=instance.team_id, notice_at=now,
                                           preempt_at=now + notice, reason=reason[:200] or "capacity needed",
                                           issued_by=actor if getattr(actor, "is_authenticated", False) else None)
    record_event(actor=actor, action="billing.preemption.notice", target=instance, team=instance.team_id,
                 details={"preempt_at": item.preempt_at, "reason": item.reason, "notice_s": int(notice.total_seconds())})
    publish_on_commit([team_group(instance.team_id)], "preemption", LivePreemption(
        team=instance.team_id, instance=instance.pk, name=instance.name,
        preempt_at=item.preempt_at.isoformat(), seconds=int(notice.total_seconds()), reason=item.reason,
    ))
    return item


def spot_against_max(*, now: datetime | None = None) -> list[tuple[Instance, Decimal]]:
    """(instance, spot price in effect now) for each running spot instance with a max
    price; the alert rule on spot price against max price reads these too."""
    now = now or timezone.now()
    found, prices = [], {}
    candidates = (Instance.objects.filter(state=State.RUNNING, pricing_model=PricingModel.SPOT, max_price__isnull=False)
                  .select_related("gpu_model", "slice_profile__gpu_model").order_by("id"))
    for instance in candidates:
        if instance.sku not in prices:
            quote = catalog.quote(sku=instance.sku, pricing_model=PricingModel.SPOT, count=1, team_id=None, at=now)
            prices[instance.sku] = getattr(quote, "per_gpu_hour", None)
        if prices[instance.sku] is not None:
            found.append((instance, prices[instance.sku]))
    return found


def over_max_price(*, now: datetime | None = None) -> list[tuple[Instance, Decimal]]:
    """Those of ``spot_against_max`` the spot price went above, that have no notice yet."""
    pending = set(PreemptionNotice.objects.filter(status=NoticeStatus.PENDING).values_list("instance_id", flat=True))
    return [(i, spot) for i, spot in spot_against_max(now=now) if spot > i.max_price and i.pk not in pending]


def enforce_max_prices(*, now: datetime | None = None, notice: timedelta = DEFAULT_NOTICE) -> list[PreemptionNotice]:
    """Give the preemption notice to each spot instance the spot price went above the max
    price of. Each is its own transaction: one that cannot be noticed does not stop the rest."""
    now = now or timezone.now()
    issued = []
    for instance, spot in over_max_price(now=now):
        reason = f"spot price {price_text(spot)}/GPU-hour is above its max price {price_text(instance.max_price)}"
        try:
            issued.append(issue_preemption_notice(actor="system", instance=instance, notice=notice, reason=reason,
                                                  now=now))
        except LifecycleError:
            continue  # ended or noticed meanwhile
    return issued


def preempt_due(*, now: datetime | None = None) -> list[PreemptionNotice]:
    """Preempt each instance whose notice has run out. Each notice is its own
    transaction: one that cannot be carried out is marked failed (and audited), and the
    rest go on."""
    now = now or timezone.now()
    done = []
    for pk in PreemptionNotice.objects.filter(status=NoticeStatus.PENDING, preempt_at__lte=now).values_list("pk", flat=True):
        try:
            item = _preempt_one(pk, now)
        except LifecycleError as exc:
            item = _notice_failed(pk, now, str(exc))
        if item is not None:
            done.append(item)
    return done


@transaction.atomic
def _preempt_one(pk: int, now: datetime) -> PreemptionNotice | None:
    item = PreemptionNotice.objects.select_for_update().select_related("instance").get(pk=pk)
    if item.status != NoticeStatus.PENDING:
        return None
    if item.instance.state == State.RUNNING:
        what = "spot capacity" if item.instance.pricing_model == PricingModel.SPOT else "idle capacity"
        preempt_instance(actor="system", instance=item.instance, reason=f"{what} reclaimed: {item.reason}", at=now)
        item.status = NoticeStatus.DONE
    else:
        item.status = NoticeStatus.MOOT
    item.done_at = now
    item.save(update_fields=["status", "done_at"])
    record_event(actor="system", action="billing.preemption.done", target=item.instance, team=item.team_id,
                 details={"notice": item.pk, "status": item.status})
    return item


@transaction.atomic
def _notice_failed(pk: int, now: datetime, why: str) -> PreemptionNotice:
    item = PreemptionNotice.objects.select_for_update().select_related("instance").get(pk=pk)
    item.status, item.done_at = NoticeStatus.FAILED, now
    item.save(update_fields=["status", "done_at"])
    record_event(actor="system", action="billing.preemption.done", target=item.instance, team=item.team_id,
                 outcome=Outcome.FAILURE, details={"notice": item.pk, "status": item.status, "error": why[:200]})
    return item


def price_text(value: Decimal) -> str:
    """A price per hour as people read it: its own decimals, at least 2 (0.40, 1.794)."""
    whole, _, frac = f"{value.normalize():f}".partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def check_max_price(value, *, pricing_model: str, sku: str, at: datetime) -> Decimal | None:
    """A spot launch's ceiling per GPU-hour, as Decimal, or a ValidationError on ``max_price``."""
    if value is None or value == "":
        return None
    if pricing_model != PricingModel.SPOT:
        raise ValidationError({"max_price": "A max price applies to spot launches only."})
    try:
        price = ascii_decimal(value)
    except (InvalidOperation, ValueError):
        raise ValidationError({"max_price": f"{str(value)[:40]!r} is not a price per GPU-hour."}) from None
    if not price.is_finite():
        raise ValidationError({"max_price": "The max price is a finite number."})
    if price <= 0:
        raise ValidationError({"max_price": "The max price is more than zero."})
    price = price.quantize(Decimal("0.000001"), rounding=ROUND_DOWN)
    if price <= 0:
        raise ValidationError({"max_price": "The max price is at least 0.000001 per GPU-hour."})
    listed = getattr(catalog.quote(sku=sku, pricing_model=PricingModel.ON_DEMAND, count=1, team_id=None, at=at),
                     "per_gpu_hour", None)
    if listed is not None and price > listed * MAX_PRICE_CEILING:
        raise ValidationError({"max_price": f"{price_text(price)} per GPU-hour is more than {MAX_PRICE_CEILING} "
                                            f"times the on-demand price ({price_text(listed)}); give a real ceiling."})
    if price >= _MAX_PRICE_LIMIT:
        raise ValidationError({"max_price": f"The max price is below {_MAX_PRICE_LIMIT} per GPU-hour."})
    spot = getattr(catalog.quote(sku=sku, pricing_model=PricingModel.SPOT, count=1, team_id=None, at=at),
                   "per_gpu_hour", None)
    if spot is not None and spot > price:
        raise ValidationError({"max_price": f"The spot price now ({price_text(spot)} per GPU-hour) is above "
                                            f"{price_text(price)}; the instance would be preempted at once."})
    return price
