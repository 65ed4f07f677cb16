"""Billing verbs. Each change runs in one transaction with its audit event; views,
serializers and tasks only call these. Bad input raises ``ValidationError`` naming the
field (a 400 with nothing written); a request the billing state does not allow raises
``BillingConflict`` (a 409)."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.models import Outcome
from audit.services import record_event
from console.live import publish_on_commit, team_group
from console.models import Membership, Role, Team
from console.validators import ascii_decimal
from instances import services as instance_services
from instances.models import GpuModel, SliceProfile

from . import costs, figures, invoicing, metering, pricing
from .models import (
    Adjustment,
    Basis,
    Budget,
    BudgetAlert,
    Charge,
    Invoice,
    InvoiceStatus,
    LineKind,
    MeterState,
    Price,
    PriceKind,
    Reservation,
    SpotPrice,
    SpotSource,
    Term,
    UnratedUsage,
    currency,
)

SPOT_FLOOR = Decimal("0.25")
SPOT_CEILING = Decimal("0.90")
SPOT_STEP = Decimal("0.08")
METER_LOOKBACK = timedelta(hours=2)
METER_CHUNK = timedelta(days=1)


class BillingConflict(instance_services.LifecycleError):
    """A request the billing state does not allow (answers 409)."""

    code = "billing_conflict"


class InvoiceIssued(BillingConflict):
    code = "invoice_issued"


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


# --- catalog ---------------------------------------------------------------------------


def known_skus() -> set[str]:
    skus = set(GpuModel.objects.values_list("name", flat=True))
    for model, kind, name in SliceProfile.objects.values_list("gpu_model__name", "kind", "name"):
        skus.add(f"{model}:{kind}:{name}")
    return skus


def _check_sku(sku: str, field: str = "sku") -> None:
    if sku not in known_skus():
        raise ValidationError({field: f"Unknown SKU {sku!r}: use a GPU model name or <model>:<mig|vgpu>:<profile>."})


def _check_rate(value, field: str) -> Decimal:
    try:
        return pricing.rate(value)
    except (ValueError, ArithmeticError) as exc:
        raise ValidationError({field: f"{exc}."}) from None


@transaction.atomic
def set_price(
    *, actor, sku: str, kind: str, hourly, effective_from: datetime, effective_until: datetime | None = None,
    now: datetime | None = None,
) -> Price:
    """Add a catalog period. It may not start before ``now`` (a price never changes
    retroactively). The period in force at its start is cut there (and, if it ran past
    the new period's end, resumes after it); any other overlap is refused."""
    now = _now(now)
    _check_sku(sku)
    if kind not in PriceKind.values:
        raise ValidationError({"kind": f"Unknown price kind {kind!r}; use one of {', '.join(PriceKind.values)}."})
    hourly = _check_rate(hourly, "hourly")
    if effective_from < now:
        raise ValidationError({"effective_from": "A price cannot start in the past; prices never change retroactively."})
    if effective_until is not None and effective_until <= effective_from:
        raise ValidationError({"effective_until": "effective_until must be after effective_from."})
    cover = None
    for p in Price.objects.select_for_update().filter(sku=sku, kind=kind):
        starts_before_end = effective_until is None or p.effective_from < effective_until
        ends_after_start = p.effective_until is None or effective_from < p.effective_until
        if not (starts_before_end and ends_after_start):
            continue
        if p.effective_from < effective_from:
            cover = p
            continue
        until = f"{p.effective_until:%Y-%m-%d %H:%M}" if p.effective_until else "open-ended"
        raise ValidationError(
            {"effective_from": f"Overlaps the {sku} {kind} price from {p.effective_from:%Y-%m-%d %H:%M} ({until})."}
        )
    resumed = _cut(cover, effective_from, effective_until, actor, now) if cover else None
    price = Price.objects.create(
        sku=sku, kind=kind, hourly=hourly, effective_from=effective_from, effective_until=effective_until,
        created_by=_user(actor), created_at=now,
    )
    record_event(
        actor=actor, action="billing.price.set", target=price,
        details={"sku": sku, "kind": kind, "hourly": str(hourly), "from": effective_from, "until": effective_until,
                 "cut": cover.pk if cover else None, "resumed": resumed.pk if resumed else None},
    )
    return price


def _cut(cover: Price, start: datetime, end: datetime | None, actor, now: datetime) -> Price | None:
    """End ``cover`` at ``start``; if it ran past ``end``, its price resumes at ``end``."""
    old_end = cover.effective_until
    cover.effective_until = start
    cover.save(update_fields=["effective_until"])
    if end is None or (old_end is not None and old_end <= end):
        return None
    return Price.objects.create(sku=cover.sku, kind=cover.kind, hourly=cover.hourly, effective_from=end,
                                effective_until=old_end, created_by=_user(actor), created_at=now)


def _user(actor):
    return actor if getattr(actor, "is_authenticated", False) else None


def price_in_effect(sku: str, kind: str, at: datetime) -> Decimal | None:
    return (
        Price.objects.filter(sku=sku, kind=kind, effective_from__lte=at)
        .filter(Q(effective_until__isnull=True) | Q(effective_until__gt=at))
        .values_list("hourly", flat=True)
        .first()
    )


@transaction.atomic
def set_spot_price(*, actor, sku: str, hourly, now: datetime | None = None) -> SpotPrice:
    """An operator sets the spot price of a SKU from now on."""
    now = _now(now)
    _check_sku(sku)
    hourly = _check_rate(hourly, "hourly")
    # Two settings at the same instant: the later one is the price.
    spot, _ = SpotPrice.objects.update_or_create(
        sku=sku, time=now, defaults={"hourly": hourly, "source": SpotSource.OPERATOR, "set_by": _user(actor)}
    )
    record_event(actor=actor, action="billing.spot_price.set", target=spot, details={"sku": sku, "hourly": str(hourly)})
    # Instances whose max price it passes get their notice with the price, not a tick later.
    instance_services.enforce_max_prices(now=now)
    return spot


def spot_in_effect(sku: str, at: datetime) -> Decimal | None:
    return SpotPrice.objects.filter(sku=sku, time__lte=at).order_by("-time").values_list("hourly", flat=True).first()


@transaction.atomic
def import_spot_prices(*, actor, rows: list[dict], source: str = "", now: datetime | None = None) -> list[SpotPrice]:
    """Spot prices from a feed: rows {sku, hourly, time (ISO 8601 with a zone; default
    now)}. All or nothing: every row is checked (known SKU, a valid price, a time not in
    the past, no two rows for one SKU and instant) before any is written; one audit
    event lists them."""
    now = _now(now)
    known, seen, parsed, errors = known_skus(), set(), [], []
    for n, row in enumerate(rows, start=1):
        try:
            parsed.append(_spot_row(row, known, now))
        except ValidationError as exc:
            errors.append(f"row {n}: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
            continue
        key = (parsed[-1][0], parsed[-1][2])
        if key in seen:
            errors.append(f"row {n}: a second price for {key[0]} at {key[1].isoformat()}")
        seen.add(key)
    if not rows:
        errors.append("the file holds no prices")
    if errors:
        raise ValidationError({"rows": errors[:50]})
    made = []
    for sku, hourly, time in parsed:
        spot, _ = SpotPrice.objects.update_or_create(
            sku=sku, time=time, defaults={"hourly": hourly, "source": SpotSource.IMPORT, "set_by": _user(actor)})
        made.append(spot)
    record_event(actor=actor, action="billing.spot_price.import", target_type="billing.spotprice",
                 details={"source": source[:200], "count": len(made),
                          "prices": [{"sku": s.sku, "hourly": str(s.hourly), "time": s.time} for s in made[:200]]})
    return made


def _spot_row(row, known: set[str], now: datetime) -> tuple[str, Decimal, datetime]:
    if not isinstance(row, dict):
        raise ValidationError({"row": "Each price is an object with sku, hourly and time."})
    sku = str(row.get("sku") or "").strip()
    if sku not in known:
        raise ValidationError({"sku": f"Unknown SKU {sku!r}."})
    raw = row.get("hourly")
    try:
        hourly = pricing.rate(ascii_decimal(raw))
    except (ValueError, ArithmeticError, TypeError):
        raise ValidationError({"hourly": f"{raw!r} is not a positive price with at most 6 decimal places."}) from None
    text = str(row.get("time") or "").strip()
    if not text:
        return sku, hourly, now
    time = costs.parse_instant(text, "time")
    if time < now:
        raise ValidationError({"time": f"{text} is in the past; spot prices never change retroactively."})
    return sku, hourly, time


@transaction.atomic
def move_spot_market(*, now: datetime | None = None, rng: random.Random | None = None) -> list[SpotPrice]:
    """One step of the demo's simulated market (scheduled only with
    SPOT_MARKET_SIMULATION): each SKU with an on-demand price moves by at most ±8% a
    step, kept between 25% and 90% of on-demand. A SKU whose latest price came from an
    operator or an imported feed is left alone: the simulation never overwrites one."""
    now = _now(now)
    rng = rng or random.Random()
    moved = []
    latest = {}
    for sku, source, hourly in SpotPrice.objects.filter(time__lte=now).order_by("sku", "time").values_list(
        "sku", "source", "hourly"
    ):
        latest[sku] = (source, hourly)
    for sku in sorted(set(Price.objects.filter(kind=PriceKind.ON_DEMAND).values_list("sku", flat=True))):
        list_price = price_in_effect(sku, PriceKind.ON_DEMAND, now)
        if list_price is None or latest.get(sku, (SpotSource.MARKET,))[0] != SpotSource.MARKET:
            continue
        if SpotPrice.objects.filter(sku=sku, time__gt=now).exclude(source=SpotSource.MARKET).exists():
            continue
        last = latest[sku][1] if sku in latest else list_price * Decimal("0.40")
        step = SPOT_STEP * rng.randint(-1000, 1000) / 1000
        new = min(max(last * (1 + step), list_price * SPOT_FLOOR), list_price * SPOT_CEILING)
        new = new.quantize(Decimal("0.0001"))
        moved.append(SpotPrice(sku=sku, hourly=new, time=now, source=SpotSource.MARKET))
    SpotPrice.objects.bulk_create(moved, ignore_conflicts=True)
    if moved:
        record_event(
            actor="system", action="billing.spot_market.move", target_type="billing.spotprice",
            details={s.sku: str(s.hourly) for s in moved},
        )
    return moved


# --- reservations ----------------------------------------------------------------------


@transaction.atomic
def purchase_reservation(
    *, actor, team: Team, gpu_model: GpuModel, gpu_count: int, term: str, start: datetime,
    now: datetime | None = None,
) -> Reservation:
    """Commit ``team`` to ``gpu_count`` GPUs of ``gpu_model`` from ``start`` for the term,
    at the price of the term in effect at ``start`` (fixed for the whole term)."""
    now = _now(now)
    if not isinstance(gpu_count, int) or gpu_count < 1:
        raise ValidationError({"gpu_count": "Reserve at least one GPU."})
    if term not in Term.values:
        raise ValidationError({"term": f"Unknown term {term!r}; use 1y or 3y."})
    if start < now:
        raise ValidationError({"start": "A reservation cannot start in the past."})
    on_demand = price_in_effect(gpu_model.name, PriceKind.ON_DEMAND, start)
    if on_demand is None:
        raise ValidationError({"gpu_model": f"{gpu_model.name} has no on-demand price at {start:%Y-%m-%d %H:%M} UTC."})
    if term == Term.ONE_YEAR:
        hourly = pricing.one_year_rate(on_demand)
    else:
        hourly = price_in_effect(gpu_model.name, PriceKind.RESERVED_3Y, start)
        if hourly is None:
            raise ValidationError({"term": f"The catalog has no 3-year price for {gpu_model.name}."})
    reservation = Reservation.objects.create(
        team=team, gpu_model=gpu_model, gpu_count=gpu_count, term=term, start=start,
        end=pricing.term_end(start, term), hourly=hourly, created_by=_user(actor), created_at=now,
    )
    record_event(
        actor=actor, action="billing.reservation.create", target=reservation, team=team,
        details={"gpu_model": gpu_model.name, "gpu_count": gpu_count, "term": term, "start": start,
                 "hourly": str(hourly)},
    )
    return reservation


# --- metering and invoices -------------------------------------------------------------


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
    from alerting import feed

    now = _now(now)
    for rule in feed.fleet_rules("unrated_usage"):
        feed.reconcile(feed.AlertKind.UNRATED, _unrated_conditions(rule), now=now, scope=Q(rule=rule))


def _unrated_conditions(rule) -> list:
    from alerting import feed

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
    """Refresh the drafts of the (team, month) pairs the window touched, and the current
    month's draft of each such team (where corrections to issued months land)."""
    months = {date(d.year, d.month, 1) for d, _, _ in pricing.day_segments(result.start, result.end)}
    pairs = set(result.months)
    pairs |= set(Invoice.objects.filter(month__in=months, status=InvoiceStatus.DRAFT).values_list("team_id", "month"))
    current = pricing.month_start(now).date()
    teams = {t for t, _ in pairs}
    touched = {}
    for month in sorted({m for _, m in pairs} | ({current} if teams else set())):
        wanted = teams if month == current else {t for t, m in pairs if m == month}
        for invoice in refresh_invoices(month=month, team_ids=wanted, now=now):
            touched[invoice.pk] = invoice.total
    return touched


def refresh_invoices(*, month: date, team_ids, now: datetime) -> list[Invoice]:
    """(Re)compute the drafts of ``month`` for ``team_ids`` from charges, corrections and
    adjustments, in a few queries whatever the number of teams. Issued invoices are left
    as they are; a draft is created where there is something to bill."""
    team_ids = sorted(set(team_ids))
    existing = {i.team_id: i for i in Invoice.objects.select_for_update().filter(month=month, team_id__in=team_ids)}
    teams = [t for t in team_ids if not (t in existing and existing[t].is_issued)]
    usage = invoicing.usage_lines(month, teams)
    # Corrections to issued months land on the team's earliest draft only, so that two
    # drafts open at once (just after a month ends) never both carry one.
    earlier = set(Invoice.objects.filter(team_id__in=teams, status=InvoiceStatus.DRAFT, month__lt=month)
                  .values_list("team_id", flat=True))
    fixes = invoicing.correction_lines(month, [t for t in teams if t not in earlier])
    start = pricing.month_start(month)
    new = [Invoice(team_id=t, month=month, period_start=start, period_end=pricing.next_month(start), currency=currency())
           for t in teams if t not in existing and (usage.get(t) or fixes.get(t))]
    for invoice in Invoice.objects.bulk_create(new):
        existing[invoice.team_id] = invoice
    manual = {}
    for a in Adjustment.objects.filter(invoice__in=[existing[t] for t in teams if t in existing]).order_by("id"):
        manual.setdefault(a.invoice_id, []).append(
            invoicing.Line(kind=LineKind.ADJUSTMENT, description=f"Adjustment: {a.reason}", amount=a.amount))
    drafts = [(existing[t], usage.get(t, []) + fixes.get(t, []) + manual.get(existing[t].pk, []))
              for t in teams if t in existing]
    invoicing.write(drafts, now)
    return [invoice for invoice, _ in drafts]


def refresh_invoice(*, team_id: int, month: date, now: datetime) -> Invoice | None:
    found = refresh_invoices(month=month, team_ids=[team_id], now=now)
    return found[0] if found else None


@transaction.atomic
def issue_invoice(*, actor, invoice: Invoice, now: datetime | None = None) -> Invoice:
    """Freeze a past month's draft: from here on it never changes."""
    now = _now(now)
    invoice = Invoice.objects.select_for_update().select_related("team").get(pk=invoice.pk)
    if invoice.is_issued:
        raise InvoiceIssued(f"Invoice {invoice.number} is already issued.")
    if invoice.period_end > now:
        raise BillingConflict(f"The month of {invoice.month:%B %Y} is not over; its invoice stays a draft until it is.")
    refresh_invoice(team_id=invoice.team_id, month=invoice.month, now=now)
    invoice.refresh_from_db()
    return _freeze(invoice, actor, now)


def _freeze(invoice: Invoice, actor, now: datetime) -> Invoice:
    invoice.status = InvoiceStatus.ISSUED
    invoice.number = f"{invoice.team.slug.upper()}-{invoice.month:%Y%m}"
    invoice.issued_at = now
    invoice.save(update_fields=["status", "number", "issued_at"])
    record_event(
        actor=actor, action="billing.invoice.issue", target=invoice, team=invoice.team_id,
        details={"number": invoice.number, "month": f"{invoice.month:%Y-%m}", "total": str(invoice.total)},
    )
    return invoice


def issue_due_invoices(*, now: datetime | None = None) -> list[Invoice]:
    """Month end: meter up to now, then issue every month that is over."""
    now = _now(now)
    meter_recent(now=now)
    return issue_months(actor="system", before=pricing.month_start(now).date(), now=now)


def issue_months(*, actor, before: date, now: datetime) -> list[Invoice]:
    """Issue the invoice of every team and month before ``before`` that has charges or a
    draft and is not issued yet, oldest month first, each month in one transaction."""
    # .order_by(): the default ordering would make DISTINCT run over every charge.
    pending = set(Charge.objects.filter(month__lt=before).order_by().values_list("team_id", "month").distinct()) | set(
        Invoice.objects.filter(month__lt=before, status=InvoiceStatus.DRAFT).values_list("team_id", "month"))
    pending -= set(Invoice.objects.filter(status=InvoiceStatus.ISSUED).values_list("team_id", "month"))
    out = []
    for month in sorted({m for _, m in pending}):
        with transaction.atomic():
            drafts = refresh_invoices(month=month, team_ids={t for t, m in pending if m == month}, now=now)
            teams = {t.pk: t for t in Team.objects.filter(pk__in=[d.team_id for d in drafts])}
            for draft in drafts:
                draft.team = teams[draft.team_id]
                out.append(_freeze(draft, actor, now))
    # Corrections found while issuing land in the current drafts.
    if out:
        with transaction.atomic():
            drafts = refresh_invoices(month=before, team_ids={i.team_id for i in out}, now=now)
            record_event(actor=actor, action="billing.invoice.refresh", target_type="billing.invoice",
                         details={"month": f"{before:%Y-%m}", "totals": {str(d.pk): str(d.total) for d in drafts}})
    return out


def refuse_invoice_change(*, actor, invoice: Invoice, attempted: str) -> None:
    """Record the refused attempt (in its own transaction, so it survives) and raise."""
    with transaction.atomic():
        record_event(
            actor=actor, action="billing.invoice.edit", target=invoice, team=invoice.team_id, outcome=Outcome.DENIED,
            details={"number": invoice.number, "attempted": attempted[:200]},
        )
    raise InvoiceIssued(
        f"Invoice {invoice.number} is issued and cannot be changed; a correction goes into a later invoice as an adjustment."
    )


def update_invoice(*, actor, invoice: Invoice, memo: str) -> Invoice:
    """Change a draft's memo (a purchase-order reference, say); an issued invoice refuses."""
    try:
        return _update_draft_memo(actor=actor, invoice=invoice, memo=memo)
    except InvoiceIssued:
        refuse_invoice_change(actor=actor, invoice=invoice, attempted=f"memo={memo!r}")
        raise AssertionError("unreachable") from None


@transaction.atomic
def _update_draft_memo(*, actor, invoice: Invoice, memo: str) -> Invoice:
    locked = _draft(invoice)
    before = locked.memo
    locked.memo = memo
    locked.save(update_fields=["memo"])
    record_event(actor=actor, action="billing.invoice.update", target=locked, team=locked.team_id,
                 details={"memo": {"from": before, "to": memo}})
    return locked


def _draft(invoice: Invoice) -> Invoice:
    locked = Invoice.objects.select_for_update().get(pk=invoice.pk)
    if locked.is_issued:
        raise InvoiceIssued(f"Invoice {locked.number} is issued.")
    return locked


def add_adjustment(*, actor, team: Team, amount, reason: str, invoice: Invoice | None = None,
                   now: datetime | None = None) -> Adjustment:
    """A credit (negative) or charge on a draft: the given one or the team's current
    month's. An issued invoice refuses, and the attempt is audited."""
    try:
        return _add_adjustment(actor=actor, team=team, amount=amount, reason=reason, invoice=invoice, now=_now(now))
    except InvoiceIssued:
        refuse_invoice_change(actor=actor, invoice=invoice, attempted=f"adjustment {amount}: {reason}")
        raise AssertionError("unreachable") from None


@transaction.atomic
def _add_adjustment(*, actor, team: Team, amount, reason: str, invoice: Invoice | None, now: datetime) -> Adjustment:
    try:
        amount = pricing.money(amount)
    except (TypeError, ArithmeticError):
        raise ValidationError({"amount": "An adjustment is an amount like -25.00."}) from None
    if not amount.is_finite() or amount == 0 or amount != amount.quantize(pricing.CENT):
        raise ValidationError({"amount": "An adjustment is a non-zero amount in whole cents."})
    if not reason.strip():
        raise ValidationError({"reason": "Say why."})
    if invoice is not None:
        invoice = _draft(invoice)
    else:
        month = pricing.month_start(now).date()
        invoice = Invoice.objects.filter(team=team, month=month).first() or Invoice.objects.create(
            team=team, month=month, period_start=pricing.month_start(now),
            period_end=pricing.next_month(now), currency=currency(),
        )
    adjustment = Adjustment.objects.create(team=team, invoice=invoice, amount=amount, reason=reason[:200],
                                           created_by=_user(actor), created_at=now)
    refresh_invoice(team_id=team.pk, month=invoice.month, now=now)
    record_event(actor=actor, action="billing.adjustment.create", target=adjustment, team=team,
                 details={"amount": str(amount), "reason": reason, "invoice": invoice.pk})
    return adjustment


# --- budgets ----------------------------------------------------------------------------


def _check_thresholds(values, field: str) -> list[int]:
    if not isinstance(values, list | tuple):
        raise ValidationError({field: "A list of percentages, e.g. [50, 80, 100]."})
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1000:
            raise ValidationError({field: f"{v!r} is not a whole percentage between 1 and 1000."})
        out.append(v)
    return sorted(set(out))


def _check_budget(amount, currency_code: str | None, now: datetime, month: date | None = None) -> Decimal:
    amount = pricing.money(amount)
    if not amount.is_finite() or amount <= 0 or amount != amount.quantize(pricing.CENT):
        raise ValidationError({"amount": "A budget is a positive amount in whole cents."})
    if currency_code is not None and currency_code != currency():
        raise ValidationError({"currency": f"Budgets are in {currency()}, this deployment's currency, not {currency_code}."})
    if month is not None:
        if month.day != 1:
            raise ValidationError({"month": "Give the month as its first day (YYYY-MM-01)."})
        if month < pricing.month_start(now).date():
            raise ValidationError({"month": "That month is over; budget the current month or a later one."})
    return amount


@transaction.atomic
def create_budget(
    *, actor, team: Team, month: date, amount, currency_code: str | None = None,
    actual_thresholds=(50, 80, 100), forecast_thresholds=(100,), recurring: bool = False, now: datetime | None = None,
) -> Budget:
    now = _now(now)
    amount = _check_budget(amount, currency_code, now, month)
    actual = _check_thresholds(list(actual_thresholds), "actual_thresholds")
    forecast = _check_thresholds(list(forecast_thresholds), "forecast_thresholds")
    if Budget.objects.filter(team=team, month=month).exists():
        raise ValidationError({"month": f"{team.name} already has a budget for {month:%B %Y}; change that one."})
    budget = Budget.objects.create(
        team=team, month=month, amount=amount, currency=currency(), actual_thresholds=actual,
        forecast_thresholds=forecast, recurring=bool(recurring), created_by=_user(actor), created_at=now,
    )
    record_event(actor=actor, action="billing.budget.create", target=budget, team=team,
                 details={"month": f"{month:%Y-%m}", "amount": str(amount), "actual": actual, "forecast": forecast,
                          "recurring": bool(recurring)})
    return budget


def save_budget(*, actor, team: Team, month: date, amount, actual_thresholds, forecast_thresholds,
                recurring: bool = False, now: datetime | None = None) -> Budget:
    """The budgets page's one form: create the month's budget, or change it if there is one."""
    existing = Budget.objects.filter(team=team, month=month).first()
    if existing is None:
        return create_budget(actor=actor, team=team, month=month, amount=amount, actual_thresholds=actual_thresholds,
                             forecast_thresholds=forecast_thresholds, recurring=recurring, now=now)
    return update_budget(actor=actor, budget=existing, amount=amount, actual_thresholds=actual_thresholds,
                         forecast_thresholds=forecast_thresholds, recurring=recurring, now=now)


@transaction.atomic
def carry_recurring_budgets(*, now: datetime | None = None) -> list[Budget]:
    """Each team whose latest budget is recurring and has none for this month gets a copy
    for this month (same amount and thresholds, still recurring), audited."""
    now = _now(now)
    month = pricing.month_start(now).date()
    made = []
    latest = {}
    for b in Budget.objects.filter(month__lt=month).order_by("team_id", "month"):
        latest[b.team_id] = b
    have = set(Budget.objects.filter(month=month).values_list("team_id", flat=True))
    for team_id, b in sorted(latest.items()):
        if not b.recurring or team_id in have:
            continue
        budget = Budget.objects.create(
            team_id=team_id, month=month, amount=b.amount, currency=b.currency, actual_thresholds=b.actual_thresholds,
            forecast_thresholds=b.forecast_thresholds, recurring=True, created_at=now,
        )
        record_event(actor="system", action="billing.budget.create", target=budget, team=team_id,
                     details={"month": f"{month:%Y-%m}", "amount": str(b.amount), "carried_from": f"{b.month:%Y-%m}",
                              "recurring": True})
        made.append(budget)
    return made


@transaction.atomic
def update_budget(*, actor, budget: Budget, amount=None, currency_code: str | None = None,
                  actual_thresholds=None, forecast_thresholds=None, recurring: bool | None = None,
                  now: datetime | None = None) -> Budget:
    now = _now(now)
    changes = {}
    if amount is not None or currency_code is not None:
        new_amount = _check_budget(amount if amount is not None else budget.amount, currency_code, now)
        if new_amount != budget.amount:
            changes["amount"] = new_amount
    if actual_thresholds is not None:
        changes["actual_thresholds"] = _check_thresholds(actual_thresholds, "actual_thresholds")
    if forecast_thresholds is not None:
        changes["forecast_thresholds"] = _check_thresholds(forecast_thresholds, "forecast_thresholds")
    if recurring is not None and bool(recurring) != budget.recurring:
        changes["recurring"] = bool(recurring)
    before = {k: str(getattr(budget, k)) for k in changes}
    for k, v in changes.items():
        setattr(budget, k, v)
    if changes:
        budget.save(update_fields=list(changes))
    record_event(actor=actor, action="billing.budget.update", target=budget, team=budget.team_id,
                 details={"before": before, "after": {k: str(v) for k, v in changes.items()}})
    return budget


@transaction.atomic
def delete_budget(*, actor, budget: Budget) -> None:
    record_event(actor=actor, action="billing.budget.delete", target=budget, team=budget.team_id,
                 details={"month": f"{budget.month:%Y-%m}", "amount": str(budget.amount)})
    budget.delete()


def check_budgets(*, now: datetime | None = None, notify: bool = True) -> list[BudgetAlert]:
    """Raise an alert for each threshold of this month's budgets that actual or forecast
    spend has crossed, once: shown in the console, pushed live and mailed to admins."""
    now = _now(now)
    month = pricing.month_start(now).date()
    carry_recurring_budgets(now=now)
    raised = []
    for budget in Budget.objects.filter(month=month).select_related("team"):
        with transaction.atomic():
            raised += _check_budget_thresholds(budget, now, notify)
    _end_budget_alerts(month, now)
    return raised


def budget_alert_key(alert: BudgetAlert) -> str:
    return f"budget:{alert.budget_id}:{alert.basis}:{alert.percent}"


def _end_budget_alerts(month: date, now: datetime) -> None:
    """Budget alerts of past months, deleted budgets or dropped thresholds resolve on
    the Alerts page; this month's crossed thresholds stay until acknowledged or resolved."""
    from alerting import feed

    current = BudgetAlert.objects.filter(budget__month=month).select_related("budget")
    keep = {budget_alert_key(a) for a in current
            if a.percent in (a.budget.actual_thresholds if a.basis == Basis.ACTUAL else a.budget.forecast_thresholds)}
    feed.resolve_others(feed.AlertKind.BUDGET, keep, now=now, why="the budget month or threshold ended")


def _check_budget_thresholds(budget: Budget, now: datetime, notify: bool) -> list[BudgetAlert]:
    month = figures.team_month(budget.team_id, now=now)
    spend = {Basis.ACTUAL: month.month_to_date, Basis.FORECAST: month.forecast.point}
    done = set(BudgetAlert.objects.filter(budget=budget).values_list("basis", "percent"))
    raised = []
    for basis, thresholds in ((Basis.ACTUAL, budget.actual_thresholds), (Basis.FORECAST, budget.forecast_thresholds)):
        if basis not in spend:
            continue
        for percent in thresholds:
            if (basis, percent) in done or spend[basis] * 100 < budget.amount * percent:
                continue
            alert = BudgetAlert.objects.create(budget=budget, team=budget.team, basis=basis, percent=percent,
                                               spend=spend[basis], crossed_at=now)
            raised.append(alert)
            _announce_alert(alert, budget, notify)
    return raised


def _open_budget_alert(alert: BudgetAlert, budget: Budget, text: str) -> None:
    """The crossing on the one Alerts page, routed to the team's notification channels."""
    from alerting import feed

    severity = feed.Severity.CRITICAL if alert.percent >= 100 else feed.Severity.WARNING
    feed.raise_alert(feed.AlertKind.BUDGET, feed.Condition(
        key=budget_alert_key(alert), message=text, value=float(alert.spend), threshold=float(alert.percent),
        team_id=budget.team_id, severity=severity, category=feed.Category.BUDGET,
    ), now=alert.crossed_at)


def _announce_alert(alert: BudgetAlert, budget: Budget, notify: bool) -> None:
    what = "Forecast month-end spend" if alert.basis == Basis.FORECAST else "Spend this month"
    text = (f"{what} for {budget.team.name} is {alert.spend} {budget.currency}, {alert.percent}% or more of the "
            f"{budget.month:%B %Y} budget of {budget.amount} {budget.currency}.")
    record_event(actor="system", action="billing.budget.alert", target=alert, team=budget.team_id,
                 details={"basis": alert.basis, "percent": alert.percent, "spend": str(alert.spend),
                          "budget": str(budget.amount)})
    _open_budget_alert(alert, budget, text)
    publish_on_commit([team_group(budget.team_id)], "budget", {
        "team": budget.team_id, "basis": alert.basis, "percent": alert.percent, "spend": str(alert.spend),
        "amount": str(budget.amount), "currency": budget.currency, "message": text,
    })
    if notify:
        emails = list(Membership.objects.filter(team_id=budget.team_id, role=Role.ADMIN)
                      .exclude(user__email="").values_list("user__email", flat=True))
        if emails:
            subject = f"[GPU Console] {budget.team.name}: {alert.percent}% of the {budget.month:%B} budget ({alert.basis})"
            transaction.on_commit(lambda: send_mail(subject, text, None, emails, fail_silently=True))


# --- reads and exports -------------------------------------------------------------------


def month_to_date(team: Team, now: datetime | None = None) -> Decimal:
    """What ``team`` has spent so far this month (UTC), as metered, before credits
    (``billing.figures``)."""
    return costs.month_to_date(Charge.objects.filter(team=team), _now(now))


def record_export(*, actor, fmt: str, start: datetime, end: datetime, team: Team | None) -> None:
    record_event(actor=actor, action="billing.export", team=team, target_type="billing.charge",
                 details={"format": fmt, "start": start, "end": end, "team": team.name if team else "all"})
