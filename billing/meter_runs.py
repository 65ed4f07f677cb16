"""Metering runs: a window metered again (and the drafts it feeds refreshed), the
periodic catch-up, and the operators' alerts on usage held unrated."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from alerting import feed
from audit.recording import record_event

from . import metering, pricing
from .invoices import issue_months, refresh_invoices
from .models import (
    Invoice,
    InvoiceStatus,
    MeterState,
    UnratedUsage,
)

METER_LOOKBACK = timedelta(hours=2)
METER_CHUNK = timedelta(days=1)


@transaction.atomic
def meter_window(*, actor, start: datetime, end: datetime, now: datetime | None = None) -> metering.Result:
    """Rebuild usage and charges for the UTC days touching [start, end), then the drafts
    they feed. Idempotent: a window metered again replaces what it made."""
    now = _now(now)
    if end <= start:
        raise ValidationError({"end": "end must be after start."})
    result = metering.meter(start, end, now=now)
    drafts = _refresh_affected(result, now)
    record_event(
        actor=actor, action="billing.meter", target_type="billing.charge",
        target_id=f"{result.start:%Y-%m-%d}/{result.end:%Y-%m-%d}",
        target_name=f"charges of {result.start:%Y-%m-%d} to {result.end:%Y-%m-%d} (UTC days, end excluded)",
        details={"start": result.start, "end": result.end, "usage_records": result.usage_records,
                 "charges": result.charges, "unrated": result.unrated, "drafts": {str(k): str(v) for k, v in drafts.items()}},
    )
    return result


def meter_recent(*, now: datetime | None = None, chunk: timedelta = METER_CHUNK) -> metering.Result:
    """The periodic run: from where the last run stopped (less a lookback, so runs that
    ended meanwhile get their minimum and first-hour rules) up to now. A missed stretch
    is caught up in bounded chunks (a day each), each its own transaction that moves
    the mark forward: an outage of a week is seven small commits, not one huge one, and
    a failure keeps what came before it."""
    now = _now(now)
    with transaction.atomic():
        state, _ = MeterState.objects.get_or_create(id=1)
    since = min(state.metered_until or pricing.month_start(now), now)
    cursor = since - METER_LOOKBACK
    total = metering.Result(cursor, now)
    while True:
        stop = min(pricing.floor_day(cursor) + chunk, now)
        with transaction.atomic():
            state = MeterState.objects.select_for_update().get(id=1)
            result = meter_window(actor="system", start=cursor, end=stop, now=now)
            state.metered_until = max(stop, state.metered_until or stop)
            state.save(update_fields=["metered_until"])
        total.usage_records += result.usage_records
        total.charges += result.charges
        total.unrated += result.unrated
        total.months |= result.months
        if stop >= now:
            return total
        cursor = stop


def check_unrated(*, now: datetime | None = None) -> None:
    """The operators' rules on ``unrated_usage`` (alerting/rules.py): one alert per SKU
    and pricing model whose held GPU-hours meet the rule, resolved once that usage is
    priced and metered again."""
    now = _now(now)
    for rule in feed.fleet_rules("unrated_usage"):
        feed.reconcile(feed.AlertKind.UNRATED, _unrated_conditions(rule), now=now, scope=Q(rule=rule))


def _unrated_conditions(rule) -> list:
    held = UnratedUsage.objects.all()
    if rule.host_id:
        held = held.filter(instance__host_id=rule.host_id)
    if rule.gpu_model_id:
        held = held.filter(instance__gpu_model_id=rule.gpu_model_id)
    groups: dict[tuple[str, str], dict] = {}
    for row in held.order_by("found_at", "id"):
        group = groups.setdefault((row.sku, row.pricing_model), {"seconds": 0, "teams": set(), "reason": row.reason})
        group["seconds"] += row.gpu_seconds
        group["teams"].add(row.team_id)
    found = []
    for (sku, pricing_model), group in sorted(groups.items()):
        hours = round(group["seconds"] / 3600, 2)
        if not feed.holds(rule.comparison, hours, rule.threshold):
            continue
        teams = len(group["teams"])
        found.append(feed.Condition(
            key=f"r{rule.pk}:unrated:{sku}:{pricing_model}", rule_id=rule.pk, severity=rule.severity,
            category=feed.Category.BILLING, value=hours, threshold=rule.threshold,
            message=f"{hours:g} GPU-hours of {sku} ({pricing_model}) held unrated for {teams} "
                    f"team{'s' if teams != 1 else ''}: {group['reason']} Price it, then meter again.",
        ))
    return found


def _refresh_affected(result: metering.Result, now: datetime) -> dict[int, Decimal]:
    """Refresh the drafts of the (team, month) pairs the window touched, and every later
    open draft of each such team up to the current month's. A correction to an issued
    month lands on the team's earliest draft after it: re-metering the issued month
    changes it, and a draft opened for an older month can take it over from a later
    draft (a month just over and not issued yet), so those later drafts are refreshed
    too, oldest first."""
    months = {date(d.year, d.month, 1) for d, _, _ in pricing.day_segments(result.start, result.end)}
    invoiced = set(Invoice.objects.filter(month__in=months).values_list("team_id", "month", "status"))
    pairs = set(result.months) | {(t, m) for t, m, status in invoiced if status == InvoiceStatus.DRAFT}
    # Teams with an issued month in the window, charges left in it or not (one whose
    # usage can no longer be priced has none, and owes a correction all the same).
    corrected = {t for t, _, status in invoiced if status == InvoiceStatus.ISSUED}
    current = pricing.month_start(now).date()
    teams = {t for t, _ in pairs} | corrected
    if teams:
        pairs |= set(Invoice.objects.filter(team_id__in=teams, month__gt=min(months), status=InvoiceStatus.DRAFT)
                     .values_list("team_id", "month"))
    touched = {}
    for month in sorted({m for _, m in pairs} | ({current} if teams else set())):
        wanted = teams if month == current else {t for t, m in pairs if m == month}
        for invoice in refresh_invoices(month=month, team_ids=wanted, now=now):
            touched[invoice.pk] = invoice.total
    return touched


def issue_due_invoices(*, now: datetime | None = None) -> list[Invoice]:
    """Month end: meter up to now, then issue every month that is over."""
    now = _now(now)
    meter_recent(now=now)
    return issue_months(actor="system", before=pricing.month_start(now).date(), now=now)


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()
