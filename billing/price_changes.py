"""Changing prices: operators' catalog periods (never retroactive), spot prices set by
an operator or imported from a feed, and the demo's simulated spot market. What is in
effect is read through ``billing.prices``."""

from __future__ import annotations

import random
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event
from console.validators import ascii_decimal
from instances import preemption as instance_preemption
from instances.models import GpuModel, SliceProfile

from . import costs, prices, pricing
from .models import (
    Price,
    PriceKind,
    SpotPrice,
    SpotSource,
)

SPOT_FLOOR = Decimal("0.25")
SPOT_CEILING = Decimal("0.90")
SPOT_STEP = Decimal("0.08")


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


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
    instance_preemption.enforce_max_prices(now=now)
    return spot


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
    skus = sorted(set(Price.objects.filter(kind=PriceKind.ON_DEMAND).values_list("sku", flat=True)))
    listed = prices.in_effect(prices.ON_DEMAND, skus, now)
    for sku in skus:
        list_price = listed.get(sku)
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
