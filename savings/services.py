"""Savings verbs: the recommendations of running instances, priced by billing's own
quote and rates (``billing.pricing.monthly_saving`` turns them into a month), and the
dismissals and snoozes a team sets on them, each audited in its own transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event
from billing import pricing
from console.validators import whole_number
from instances import catalog
from instances.models import GpuModel, Instance, PricingModel, SliceProfile, State

from . import rightsizing
from .models import Dismissal, Kind
from .rightsizing import GIB, HEADROOM, IDLE_PCT, MIN_MINUTES, Shape, Usage

WINDOW_DAYS = (7, 14)
MAX_SNOOZE_DAYS = 365
MAX_REASON_CHARS = 200


@dataclass(frozen=True)
class Recommendation:
    instance: Instance
    kind: str
    current: str
    proposed: str
    proposed_sku: str | None
    proposed_count: int
    reason: str
    risk: str
    current_per_hour: Decimal
    proposed_per_hour: Decimal
    monthly_saving: Decimal
    usage: Usage
    days: int
    dismissal: Dismissal | None = None


def _gb(value: float) -> str:
    return f"{value / GIB:.1f} GB"


def describe(instance: Instance) -> str:
    what = instance.slice_profile.sku if instance.slice_profile_id else instance.gpu_model.name
    return f"{instance.gpu_count} × {what} ({instance.get_pricing_model_display().lower()})"


def recommendations(instances, *, now: datetime | None = None, days: int = 14) -> list[Recommendation]:
    """The best saving for each running instance with enough telemetry, largest first.
    Instances on reserved pricing are left out: their reservation is billed whatever
    they run (see the commitment advice instead)."""
    if days not in WINDOW_DAYS:
        raise ValidationError({"days": f"days is one of {', '.join(map(str, WINDOW_DAYS))}."})
    now = now or timezone.now()
    running = [i for i in instances.filter(state=State.RUNNING).exclude(pricing_model=PricingModel.RESERVED)
               .select_related("gpu_model", "slice_profile__gpu_model", "team")]
    usage = rightsizing.usage_by_instance([i.pk for i in running], now - timedelta(days=days), now)
    costs = catalog.instance_costs(running, now=now)
    dismissals = {(d.instance_id, d.kind): d for d in Dismissal.objects.filter(instance__in=running)}
    shapes = _Catalog.load()
    out = []
    for instance in running:
        use, cost = usage.get(instance.pk), costs.get(instance.pk)
        if use is None or use.minutes < MIN_MINUTES or cost is None or cost.price_per_hour is None:
            continue
        best = _best(instance, use, cost.price_per_hour, now, days, shapes)
        if best is not None:
            out.append(_with_dismissal(best, dismissals.get((instance.pk, best.kind)), now))
    return sorted(out, key=lambda r: (-r.monthly_saving, r.instance.name))


def _with_dismissal(rec: Recommendation, dismissal: Dismissal | None, now: datetime) -> Recommendation:
    if dismissal is None or not dismissal.in_force(now):
        return rec
    return Recommendation(**{**rec.__dict__, "dismissal": dismissal})


def _best(instance: Instance, use: Usage, current: Decimal, now: datetime, days: int,
          shapes: _Catalog) -> Recommendation | None:
    if use.idle:
        return _priced(instance, use, current, Decimal(0), Kind.STOP, None, 0, "stopped", days,
                       *_stop_words(use, days))
    found = []
    for kind, shape, words in _shapes(instance, use, shapes):
        quote = catalog.quote(sku=shape.sku, pricing_model=instance.pricing_model, count=shape.count,
                              team_id=instance.team_id, at=now)
        if quote is None or quote.price_per_hour is None:
            continue
        found.append(_priced(instance, use, current, quote.price_per_hour, kind, shape.sku, shape.count,
                             f"{shape.count} × {shape.label}", days, *words))
    found = [r for r in found if r.monthly_saving > 0]
    return max(found, key=lambda r: r.monthly_saving, default=None)


def _priced(instance, use, current, proposed, kind, sku, count, label, days, reason, risk) -> Recommendation:
    return Recommendation(
        instance=instance, kind=kind, current=describe(instance), proposed=label, proposed_sku=sku,
        proposed_count=count, reason=reason, risk=risk, current_per_hour=current, proposed_per_hour=proposed,
        monthly_saving=pricing.monthly_saving(current, proposed), usage=use, days=days,
    )


def _stop_words(use: Usage, days: int) -> tuple[str, str]:
    reason = (f"Every device idle by real activity (SM, tensor and DRAM activity below {IDLE_PCT:g}%) in "
              f"{use.idle_share:.0%} of its {use.minutes:,} observed minutes over the last {days} days, while it "
              f"holds up to {_gb(use.total_mem_peak)} of GPU memory.")
    risk = ("Stopping ends its processes and frees its GPUs; work that wakes rarely (a nightly run) would not run. "
            "An idle-stop policy stops it only after a set idle time, with a notice first.")
    return reason, risk


@dataclass(frozen=True)
class _Catalog:
    """The GPU models and slice profiles, read once for a whole list of recommendations."""

    models: tuple[GpuModel, ...]
    profiles: dict[int, tuple[SliceProfile, ...]]

    @classmethod
    def load(cls) -> _Catalog:
        profiles: dict[int, list[SliceProfile]] = {}
        for profile in SliceProfile.objects.order_by("memory_gb", "pk"):
            profiles.setdefault(profile.gpu_model_id, []).append(profile)
        return cls(tuple(GpuModel.objects.order_by("name")), {k: tuple(v) for k, v in profiles.items()})


def _shapes(instance: Instance, use: Usage, shapes: _Catalog):
    """(kind, shape, (reason, risk)) of every smaller shape that fits the usage."""
    model = instance.gpu_model
    if instance.slice_profile_id:
        here = instance.slice_profile
        scale = rightsizing.slice_compute(here.kind, here.name, here.slices_per_gpu)
        memory = here.memory_gb
    else:
        scale, memory = 1.0, model.memory_gb
    scaled = _scaled(use, scale)
    if instance.gpu_count == 1:
        for profile in (p for p in shapes.profiles.get(model.pk, ()) if p.memory_gb < memory):
            share = rightsizing.slice_compute(profile.kind, profile.name, profile.slices_per_gpu)
            shape = Shape(profile.sku, 1, profile.memory_gb, share, f"{profile.sku} ({profile.kind.upper()})")
            if rightsizing.fits(scaled, shape):
                yield Kind.SLICE, shape, _slice_words(scaled, shape, profile.kind)
    if not instance.slice_profile_id and instance.gpu_count > 1:
        n = rightsizing.fewer_gpus(use, instance.gpu_count, model.memory_gb)
        if n is not None:
            yield Kind.FEWER, Shape(model.name, n, model.memory_gb, 1.0, model.name), _fewer_words(use, instance, n)
    if not instance.slice_profile_id:
        for other in (m for m in shapes.models if m.pk != model.pk):
            share = rightsizing.relative_compute(model.name, other.name, instance.precision)
            n = share and rightsizing.gpus_needed(use, other.memory_gb, share)
            shape = n and Shape(other.name, n, other.memory_gb, share, other.name)
            if shape and n <= instance.gpu_count and rightsizing.fits(use, shape):
                yield Kind.MODEL, shape, _model_words(use, instance, shape)


def _scaled(use: Usage, scale: float) -> Usage:
    """Usage measured on a slice, in shares of the whole GPU."""
    if scale == 1.0:
        return use
    return Usage(**{**use.__dict__, "activity_p95": use.activity_p95 * scale,
                    "busy_gpus_p95": use.busy_gpus_p95 * scale})


def _slice_words(use: Usage, shape: Shape, kind: str) -> tuple[str, str]:
    reason = (f"Peak memory {_gb(use.mem_peak)} (p95 {_gb(use.mem_p95)}) and p95 activity "
              f"{use.activity_p95:.0f}% of one GPU fit {shape.label}: {shape.memory_gb} GB and "
              f"{shape.compute:.0%} of the GPU's compute, with {HEADROOM - 1:.0%} headroom.")
    if kind == "mig":
        risk = (f"A MIG slice has its own memory and SMs: a peak above {shape.memory_gb} GB fails out of memory, "
                "and a burst above its share of the SMs runs slower.")
    else:
        risk = (f"A vGPU slice has {shape.memory_gb} GB and shares the GPU's time with its neighbours: "
                "throughput drops when they are busy too.")
    return reason, risk


def _fewer_words(use: Usage, instance: Instance, n: int) -> tuple[str, str]:
    reason = (f"{instance.gpu_count} GPUs, but their peak memory together ({_gb(use.total_mem_peak)}) and p95 "
              f"compute ({use.busy_gpus_p95:.2f} GPUs' worth) fit {n} with {HEADROOM - 1:.0%} headroom.")
    risk = (f"The workload must be relaunched for {n} GPUs (its parallel size changes); a burst above the "
            "observed peak runs slower or out of memory.")
    return reason, risk


def _model_words(use: Usage, instance: Instance, shape: Shape) -> tuple[str, str]:
    reason = (f"Peak memory {_gb(use.total_mem_peak)} and p95 compute of {use.busy_gpus_p95:.2f} "
              f"{instance.gpu_model.name} fit {shape.count} × {shape.label} (its {instance.precision} tensor peak is "
              f"{shape.compute:.0%} of the {instance.gpu_model.name}'s), with {HEADROOM - 1:.0%} headroom.")
    risk = (f"Another GPU model: kernels, supported precisions and speed differ; measure a run on a {shape.label} "
            "before moving work that must finish by a deadline.")
    return reason, risk


# --- dismissals -------------------------------------------------------------------------


def _check_kind(kind) -> str:
    if kind not in Kind.values:
        raise ValidationError({"kind": f"kind is one of {', '.join(Kind.values)}."})
    return kind


def _check_days(days) -> int | None:
    if days in (None, ""):
        return None
    days = whole_number(days if isinstance(days, int) else str(days))
    if days is None:
        raise ValidationError({"days": "days is a whole number of days to snooze, or empty to dismiss for good."})
    if not 1 <= days <= MAX_SNOOZE_DAYS:
        raise ValidationError({"days": f"days is between 1 and {MAX_SNOOZE_DAYS}."})
    return days


@transaction.atomic
def dismiss(*, actor, instance: Instance, kind: str, days=None, reason: str = "",
            now: datetime | None = None) -> Dismissal:
    """Set a recommendation aside for good (``days`` None) or snooze it for ``days``."""
    kind, days = _check_kind(kind), _check_days(days)
    if len(reason) > MAX_REASON_CHARS:
        raise ValidationError({"reason": f"reason is at most {MAX_REASON_CHARS} characters."})
    now = now or timezone.now()
    until = None if days is None else now + timedelta(days=days)
    dismissal, _ = Dismissal.objects.update_or_create(
        instance=instance, kind=kind,
        defaults={"team_id": instance.team_id, "until": until, "reason": reason,
                  "created_by": actor if getattr(actor, "pk", None) else None, "created_at": now},
    )
    action = "savings.recommendation.dismiss" if until is None else "savings.recommendation.snooze"
    record_event(actor=actor, action=action, target=instance, team=instance.team_id,
                 details={"kind": kind, "until": until.isoformat() if until else None, "reason": reason})
    return dismissal


@transaction.atomic
def restore(*, actor, instance: Instance, kind: str) -> None:
    """Show a dismissed or snoozed recommendation again."""
    kind = _check_kind(kind)
    deleted, _ = Dismissal.objects.filter(instance=instance, kind=kind).delete()
    if not deleted:
        raise ValidationError({"kind": f"No {kind} recommendation of {instance.name} is dismissed."})
    record_event(actor=actor, action="savings.recommendation.restore", target=instance, team=instance.team_id,
                 details={"kind": kind})
