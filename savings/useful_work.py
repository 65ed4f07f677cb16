"""Cost per useful work, read from billing's own figures: each day's allocated cost (what
was billed for instances), its effective part (the cost of GPU-seconds with real activity)
and waste % (idle cost ÷ the cost of instances with telemetry), from ``billing.costs.idle_cost``;
and dollars per PFLOP-hour of estimated tensor work, from ``billing.costs.cost_per_pflop_hour``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from billing import costs, pricing
from billing.models import Charge


@dataclass(frozen=True)
class DayWaste:
    day: date
    allocated: Decimal
    effective: Decimal | None
    idle: Decimal
    waste_pct: Decimal | None


def waste_by_day(team, *, now: datetime, days: int) -> list[DayWaste]:
    out = []
    first = pricing.floor_day(now) - timedelta(days=days - 1)
    for start, summary in costs.idle_cost_by_day(Charge.objects.filter(team=team), first, days):
        allocated = summary.known_cost + summary.unknown_cost
        known = summary.known_cost
        waste = (summary.idle_cost * 100 / known).quantize(Decimal("0.1")) if known > 0 else None
        out.append(DayWaste(start.date(), allocated, known - summary.idle_cost if known > 0 else None,
                            summary.idle_cost, waste))
    return out


def per_pflop_hour(team, *, now: datetime, days: int) -> list[costs.FlopsCostRow]:
    start = pricing.floor_day(now) - timedelta(days=days - 1)
    return costs.cost_per_pflop_hour(Charge.objects.filter(team=team), start, now)


@dataclass(frozen=True)
class Work:
    """An instance's useful work over the window: its charges, the estimated PFLOP-hours
    (billing's figure), the achieved TFLOP/s while observed (all its devices together),
    MFU (achieved ÷ the dense peak of the precision in force, device-time weighted) and
    dollars per PFLOP-hour."""

    instance_id: int
    name: str
    cost: Decimal
    pflop_hours: float
    tflops: float | None
    mfu_pct: float | None
    per_pflop_hour: Decimal


def work(team, *, now: datetime, days: int) -> list[Work]:
    rows = per_pflop_hour(team, now=now, days=days)
    start = pricing.floor_day(now) - timedelta(days=days - 1)
    rates = _rates([r.instance_id for r in rows], start, now)
    return [Work(r.instance_id, r.name, r.cost, r.pflop_hours, *rates.get(r.instance_id, (None, None)),
                 r.per_pflop_hour) for r in rows]


def _rates(instance_ids: list[int], start: datetime, end: datetime) -> dict[int, tuple[float, float]]:
    """{instance id: (achieved TFLOP/s of all its devices, MFU %)} from the hourly rollups,
    each hour estimated at the precision in force at its start (``monitoring.flops``)."""
    from instances.precision import spans
    from monitoring import flops
    from monitoring.models import Rollup1h

    periods = spans(instance_ids, start, end)
    sums: dict[int, list[float]] = {}  # [Σ TFLOP/s × s, Σ peak × s, Σ device-seconds, devices]
    devices: dict[int, set] = {}
    rows = Rollup1h.objects.filter(instance_id__in=instance_ids, bucket__gte=start, bucket__lt=end,
                                   tensor_active_pct_avg__isnull=False).values_list(
        "instance_id", "bucket", "gpu_id", "slice_id", "gpu__model__name", "slice__profile__name",
        "slice__profile__kind", "tensor_active_pct_avg", "sm_clock_mhz_avg", "observed_s")
    for iid, bucket, gpu, piece, model, profile, kind, tensor, clock, observed in rows:
        in_force = [p for p in periods.get(iid, []) if p.start <= bucket] or periods.get(iid, [])[:1]
        precision = in_force[-1].precision if in_force else flops.DEFAULT_PRECISION
        basis = flops.basis(model, precision, share=flops.slice_share(profile, kind))
        tflops = flops.estimate(tensor, clock, basis)
        if tflops is None or not observed:
            continue
        acc = sums.setdefault(iid, [0.0, 0.0, 0.0])
        acc[0] += tflops * observed
        acc[1] += basis.peak_tflops * observed
        acc[2] += observed
        devices.setdefault(iid, set()).add((gpu, piece))
    return {iid: (round(a[0] / a[2] * len(devices[iid]), 1), round(100 * a[0] / a[1], 1))
            for iid, a in sums.items() if a[1] > 0}
