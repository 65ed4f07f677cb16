"""Read side of billing: costs grouped for the explorer, the API and forecasts. Every
function takes a ``Charge`` (or ``UsageRecord``) queryset the caller has already
narrowed with ``for_user``; sums are whole cents, turned into Decimal at the end."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db.models import Min, Q, Sum
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from console.validators import moment_in_range

from . import forecast as forecasting
from . import prices, pricing
from .models import ChargeType, PricingCategory

GROUPS = {
    "day": ("period_start",),
    "instance": ("instance_id", "instance__name"),
    "model": ("gpu_model__name",),
    "pricing_category": ("pricing_category",),
    "team": ("team_id", "team__name"),
    # instances a scaling group launched (scaling.ScalingMember); the rest in one row
    "scaling_group": ("instance__scaling_member__group_id", "instance__scaling_member__group__name"),
    # Queued jobs (jobs/): each run of a job is an instance; only jobs' charges count.
    "job": ("instance__job_run__job_id", "instance__job_run__job__name"),
}
MAX_RANGE_DAYS = 3660


def parse_instant(value: str, field: str) -> datetime:
    """A date (midnight UTC) or an ISO 8601 datetime with a time zone."""
    value = (value or "").strip()
    parsed = None
    try:
        if len(value) == 10:
            day = parse_date(value)
            parsed = datetime(day.year, day.month, day.day, tzinfo=UTC) if day else None
        else:
            parsed = parse_datetime(value.replace(" ", "+"))
    except ValueError:
        parsed = None
    if parsed is None:
        raise ValidationError({field: f"{value!r} is not a date (YYYY-MM-DD) or an ISO 8601 datetime."})
    if timezone.is_naive(parsed):
        raise ValidationError({field: "Give a time zone (e.g. 2026-11-01T00:00:00Z) or a plain date."})
    try:
        moment_in_range(parsed)
    except ValidationError as exc:
        raise ValidationError({field: exc.messages}) from None
    return parsed.astimezone(UTC)


def parse_range(start: str | None, end: str | None, *, now: datetime | None = None) -> tuple[datetime, datetime]:
    """[start, end) from query parameters; both default to the current month."""
    now = now or timezone.now()
    lo = parse_instant(start, "start") if start else pricing.month_start(now)
    hi = parse_instant(end, "end") if end else pricing.next_month(lo)
    if hi <= lo:
        raise ValidationError({"end": "end must be after start."})
    if hi - lo > timedelta(days=MAX_RANGE_DAYS):
        raise ValidationError({"end": f"A range covers at most {MAX_RANGE_DAYS} days."})
    return lo, hi


def in_range(qs, start: datetime, end: datetime):
    """Charges (or usage records) of the charge periods that start in [start, end)."""
    return qs.filter(period_start__gte=start, period_start__lt=end)


def total(qs) -> Decimal:
    return pricing.from_cents(qs.aggregate(c=Sum("billed_cents"))["c"])


def grouped(qs, group_by: str) -> list[dict]:
    """Rows {key, label, billed_cost, list_cost, gpu_hours}, largest cost first (by day:
    in time order). By instance, a reservation's unused commitment is a row of its own."""
    if group_by == "instance":
        rows = [*_sums(qs.filter(instance__isnull=False), ("instance_id", "instance__name")),
                *_sums(qs.filter(instance__isnull=True), ("reservation_id",))]
    elif group_by == "job":
        rows = _sums(qs.filter(instance__job_run__isnull=False), GROUPS[group_by])
    else:
        rows = _sums(qs, GROUPS[group_by])
    out = []
    for row in rows:
        key, label = _key_label(group_by, row)
        out.append(
            {
                "key": key,
                "label": label,
                "billed_cost": pricing.from_cents(row["billed"]),
                "list_cost": pricing.from_cents(row["listed"]),
                "gpu_hours": pricing.hours(row["priced"] or 0),
            }
        )
    if group_by != "day":
        out.sort(key=lambda r: (-r["billed_cost"], str(r["label"])))
    return out


def _sums(qs, fields):
    return qs.values(*fields).annotate(
        billed=Sum("billed_cents"), listed=Sum("list_cents"), priced=Sum("priced_seconds")
    ).order_by(*fields)


def _key_label(group_by: str, row: dict) -> tuple[str, str]:
    if group_by == "day":
        return row["period_start"].date().isoformat(), row["period_start"].date().isoformat()
    if group_by == "instance":
        if row.get("instance_id") is None:
            return f"RSV-{row['reservation_id']}", f"RSV-{row['reservation_id']} unused commitment"
        return str(row["instance_id"]), row["instance__name"]
    if group_by == "team":
        return str(row["team_id"]), row["team__name"]
    if group_by == "scaling_group":
        group_id = row["instance__scaling_member__group_id"]
        if group_id is None:
            return "none", "Not in a group"
        return str(group_id), row["instance__scaling_member__group__name"]
    if group_by == "job":
        return str(row["instance__job_run__job_id"]), row["instance__job_run__job__name"]
    value = row[GROUPS[group_by][0]]
    label = dict(PricingCategory.choices).get(value, value) if group_by == "pricing_category" else value
    return value, label


def days_between(start: datetime, end: datetime) -> list[date]:
    return [day.date() for day, _, _ in pricing.day_segments(start, end)]


def daily_by_category(qs, start: datetime, end: datetime) -> tuple[list[date], dict[str, list[Decimal]]]:
    days = days_between(start, end)
    index = {d: i for i, d in enumerate(days)}
    series = {c: [Decimal("0.00")] * len(days) for c in PricingCategory.values}
    rows = in_range(qs, start, end).values("period_start", "pricing_category").annotate(c=Sum("billed_cents"))
    for row in rows:
        i = index.get(row["period_start"].date())
        if i is not None:
            series[row["pricing_category"]][i] += pricing.from_cents(row["c"])
    return days, series


def daily_totals(qs, start: datetime, end: datetime) -> dict[date, Decimal]:
    rows = in_range(qs, start, end).values("period_start").annotate(c=Sum("billed_cents"))
    return {row["period_start"].date(): pricing.from_cents(row["c"]) for row in rows}


@dataclass(frozen=True)
class CoverageDay:
    day: date
    covered_hours: Decimal
    unused_hours: Decimal
    overflow_hours: Decimal


def coverage_by_day(qs, start: datetime, end: datetime) -> list[CoverageDay]:
    """Reserved instances' GPU-hours covered by commitments, beyond them (on-demand), and
    commitment left unused, per day."""
    covered, unused, overflow = defaultdict(int), defaultdict(int), defaultdict(int)
    rows = (
        in_range(qs, start, end)
        .filter(Q(charge_type=ChargeType.UNUSED_COMMITMENT) | Q(instance__pricing_model="reserved"))
        .exclude(sku__contains=":")
        .values("period_start", "charge_type", "pricing_category")
        .annotate(s=Sum("priced_seconds"))
        .values_list("period_start", "charge_type", "pricing_category", "s")
    )
    for day, kind, category, secs in rows:
        d = day.date()
        if kind == ChargeType.UNUSED_COMMITMENT:
            unused[d] += secs
        elif category == PricingCategory.COMMITTED:
            covered[d] += secs
        else:
            overflow[d] += secs
    return [
        CoverageDay(d, pricing.hours(covered[d]), pricing.hours(unused[d]), pricing.hours(overflow[d]))
        for d in days_between(start, end)
    ]


@dataclass(frozen=True)
class IdleRow:
    instance_id: int
    name: str
    cost: Decimal
    idle_cost: Decimal | None  # None: no telemetry for this instance
    observed_seconds: int
    idle_seconds: int


@dataclass(frozen=True)
class IdleSummary:
    rows: list[IdleRow]
    idle_cost: Decimal
    known_cost: Decimal
    unknown_cost: Decimal
    efficiency_pct: Decimal | None


def _activity(instance_ids: list[int], start: datetime, end: datetime) -> dict[int, tuple[int, int]]:
    try:
        from monitoring.activity import activity_by_instance
    except ImportError:
        return {}
    return activity_by_instance(instance_ids, start, end)


def _activity_by_day(instance_ids: list[int], start: datetime, end: datetime) -> dict[tuple[datetime, int], tuple]:
    try:
        from monitoring.activity import activity_by_instance_and_day
    except ImportError:
        return {}
    return activity_by_instance_and_day(instance_ids, start, end)


def idle_cost(qs, start: datetime, end: datetime) -> IdleSummary:
    """Money paid for GPU-seconds whose real activity was below 10%: an instance's cost ×
    idle / observed seconds from the telemetry rollups. Without telemetry it is unknown,
    never zero."""
    costs = [(iid, name, cost) for _, iid, name, cost in _instance_costs(qs, start, end)]
    return _idle_summary(costs, _activity([i for i, _, _ in costs], start, min(end, timezone.now())))


def idle_cost_by_day(qs, start: datetime, days: int) -> list[tuple[datetime, IdleSummary]]:
    """(day, ``idle_cost`` of that day) for ``days`` UTC days from ``start`` (midnight),
    read in one pass rather than one per day: the same figures."""
    end = start + days * pricing.DAY
    costs = defaultdict(list)
    for day, iid, name, cost in _instance_costs(qs, start, end, by_day=True):
        costs[day].append((iid, name, cost))
    activity = defaultdict(dict)
    ids = sorted({i for day in costs.values() for i, _, _ in day})
    for (day, iid), seconds in _activity_by_day(ids, start, min(end, timezone.now())).items():
        activity[day][iid] = seconds
    return [(day, _idle_summary(costs.get(day, []), activity.get(day, {})))
            for day in (start + k * pricing.DAY for k in range(days))]


def _instance_costs(qs, start: datetime, end: datetime, *, by_day: bool = False):
    """(charge day or None, instance id, name, cost) of the charges in [start, end), per
    instance (and day), most costly first."""
    day = ["period_start"] if by_day else []
    rows = (
        in_range(qs, start, end)
        .filter(instance__isnull=False)
        .values(*day, "instance_id", "instance__name")
        .annotate(c=Sum("billed_cents"))
        .order_by(*day, "-c", "instance_id")
    )
    return [(r.get("period_start"), r["instance_id"], r["instance__name"], pricing.from_cents(r["c"])) for r in rows]


def _idle_summary(costs: list[tuple[int, str, Decimal]], activity: dict[int, tuple[int, int]]) -> IdleSummary:
    """From (instance id, name, cost), most costly first, and {instance id: (observed,
    idle seconds)}."""
    out, idle_total, known, unknown, active_total = [], Decimal("0.00"), Decimal("0.00"), Decimal("0.00"), Decimal(0)
    for iid, name, cost in costs:
        observed, idle = activity.get(iid, (0, 0))
        if observed <= 0:
            out.append(IdleRow(iid, name, cost, None, 0, 0))
            unknown += cost
            continue
        idle_share = Decimal(min(idle, observed)) / Decimal(observed)
        wasted = (cost * idle_share).quantize(pricing.CENT)
        out.append(IdleRow(iid, name, cost, wasted, observed, idle))
        idle_total += wasted
        known += cost
        active_total += cost - wasted
    efficiency = (active_total * 100 / known).quantize(Decimal("0.1")) if known > 0 else None
    return IdleSummary(out, idle_total, known, unknown, efficiency)


@dataclass(frozen=True)
class FlopsCostRow:
    instance_id: int
    name: str
    cost: Decimal
    pflop_hours: float
    per_pflop_hour: Decimal


def cost_per_pflop_hour(qs, start: datetime, end: datetime) -> list[FlopsCostRow]:
    """Per instance with tensor telemetry: its cost over [start, end) divided by the
    effective PFLOP-hours the telemetry estimates (monitoring.flops: an estimate, with
    its basis on the instance page). Instances without such telemetry are left out."""
    try:
        from monitoring.activity import pflop_hours_by_instance
    except ImportError:
        return []
    rows = (
        in_range(qs, start, end).filter(instance__isnull=False)
        .values("instance_id", "instance__name").annotate(c=Sum("billed_cents"))
    )
    costs = {r["instance_id"]: (r["instance__name"], pricing.from_cents(r["c"])) for r in rows}
    work = pflop_hours_by_instance(list(costs), start, min(end, timezone.now()))
    out = [
        FlopsCostRow(iid, costs[iid][0], costs[iid][1], round(pflop_h, 3),
                     (costs[iid][1] / Decimal(str(pflop_h))).quantize(pricing.CENT))
        for iid, pflop_h in work.items() if pflop_h > 0
    ]
    return sorted(out, key=lambda r: r.per_pflop_hour)


def month_to_date(qs, now: datetime) -> Decimal:
    start = pricing.month_start(now)
    return total(in_range(qs, start, pricing.next_month(start)))


def forecast(qs, now: datetime, run_rate_per_hour: Decimal = Decimal(0),
             committed_per_hour: Decimal = Decimal(0)) -> forecasting.Forecast:
    """The month-end forecast (spend before credits): never below spend so far plus the
    run rate to month end; the complete days before today (back to 14 days, across the
    month boundary) add to it once there are 7 of them."""
    first = qs.aggregate(f=Min("period_start"))["f"]
    today = pricing.floor_day(now)
    history = []
    if first is not None:
        start = max(first, today - timedelta(days=forecasting.WINDOW_DAYS))
        totals = daily_totals(qs, start, today)
        history = [totals.get(d, Decimal("0.00")) for d in days_between(start, today)]
    remaining = pricing.seconds(now, pricing.next_month(now))
    # Today's charges run to ``now``; the rest of today is forecast like the days after.
    return forecasting.month_end(history, month_to_date(qs, now), remaining, run_rate_per_hour, committed_per_hour)


@dataclass(frozen=True)
class SavingHint:
    gpu_model: str
    gpus: int
    on_demand_cost: Decimal
    with_reservation: Decimal
    saving: Decimal
    reserved_hourly: Decimal


def savings_hints(usage_qs, now: datetime, days: int = 30) -> list[SavingHint]:
    """Per GPU model: what a 1-year reservation of the best size would have saved over
    the last ``days`` at the team's actual on-demand usage of whole GPUs."""
    start, end = now - timedelta(days=days), now
    intervals = defaultdict(list)
    for sku, s, e, gpus in (
        usage_qs.filter(pricing_model="on_demand", end__gt=start, start__lt=end)
        .exclude(sku__contains=":")
        .values_list("sku", "start", "end", "gpus")
        .iterator(chunk_size=2000)
    ):
        intervals[sku].append((max(s, start), min(e, end), gpus))
    hints = []
    listed = prices.in_effect(prices.ON_DEMAND, intervals, now)
    for sku, spans in sorted(intervals.items()):
        price = listed.get(sku)
        if price is None:
            continue
        reserved = pricing.one_year_rate(price)
        best = pricing.best_reservation(pricing.concurrency_profile(spans), pricing.seconds(start, end), price, reserved)
        if best is not None:
            hints.append(SavingHint(sku, best.gpus, best.on_demand_cost, best.with_reservation, best.saving, reserved))
    return hints



# --- idle cost per GPU ---------------------------------------------------------------------


@dataclass(frozen=True)
class IdleGpu:
    """One GPU of an instance: its share of the instance's cost (cost ÷ GPUs) and what
    of that was paid while it sat below 10% real activity."""

    instance_id: int
    instance: str
    team: str
    gpu: str
    cost: Decimal
    idle_cost: Decimal
    observed_seconds: int
    idle_seconds: int

    @property
    def idle_pct(self) -> Decimal:
        return (Decimal(self.idle_seconds) * 100 / self.observed_seconds).quantize(Decimal("0.1"))


def gpu_activity(instance_ids: list[int], start: datetime, end: datetime) -> dict[tuple[int, str], tuple[int, int]]:
    try:
        from monitoring.activity import activity_by_gpu
    except ImportError:
        return {}
    return activity_by_gpu(instance_ids, start, end)


def idle_cost_by_gpu(qs, start: datetime, end: datetime) -> list[IdleGpu]:
    """Per GPU with telemetry over [start, end): its cost share and idle cost, most idle
    cost first. GPUs without telemetry are left out (their idle cost is unknown)."""
    rows = (
        in_range(qs, start, end).filter(instance__isnull=False)
        .values("instance_id", "instance__name", "instance__gpu_count", "team__name")
        .annotate(c=Sum("billed_cents"))
    )
    costs = {r["instance_id"]: r for r in rows}
    activity = gpu_activity(list(costs), start, min(end, timezone.now()))
    out = []
    for (iid, uuid), (observed, idle) in activity.items():
        row = costs[iid]
        if observed <= 0:
            continue
        share = pricing.from_cents(row["c"]) / max(1, row["instance__gpu_count"])
        wasted = (share * Decimal(min(idle, observed)) / Decimal(observed)).quantize(pricing.CENT)
        out.append(IdleGpu(iid, row["instance__name"], row["team__name"], uuid, share.quantize(pricing.CENT), wasted,
                           observed, idle))
    out.sort(key=lambda g: (-g.idle_cost, g.instance, g.gpu))
    return out


@dataclass(frozen=True)
class FirstRows:
    """The first ``limit`` of ``rows`` as a page shows them, and what was left out:
    how many and their idle cost."""

    rows: list
    total: int
    rest_idle_cost: Decimal

    @property
    def left_out(self) -> int:
        return self.total - len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def first_rows(rows: list[IdleGpu], limit: int) -> FirstRows:
    rest = rows[limit:]
    return FirstRows(rows[:limit], len(rows), sum((g.idle_cost for g in rest), Decimal("0.00")))
