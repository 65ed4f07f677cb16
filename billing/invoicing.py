"""Invoice lines from rated charges. Each usage line is the exact sum of its charges'
cents; corrections compare what an issued month costs now with what was billed."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db.models import Sum

from . import pricing
from .models import (
    Charge,
    ChargeType,
    Invoice,
    InvoiceLine,
    InvoiceStatus,
    LineKind,
    PricingCategory,
)

CATEGORY_WORDS = {
    PricingCategory.STANDARD: "On-demand",
    PricingCategory.COMMITTED: "Reserved",
    PricingCategory.DYNAMIC: "Spot",
}


@dataclass
class Line:
    kind: str
    description: str
    amount: Decimal
    sku: str = ""
    pricing_category: str = ""
    instance_id: int | None = None
    reservation_id: int | None = None
    refers_to_id: int | None = None
    quantity: Decimal | None = None
    unit: str = ""
    unit_price: Decimal | None = None
    sort: tuple = ()


def usage_lines(team_id: int, month: date) -> list[Line]:
    rows = (
        Charge.objects.filter(team_id=team_id, month=month)
        .values(
            "charge_type", "pricing_category", "instance_id", "instance__name", "instance__pricing_model",
            "reservation_id", "sku", "unit_price", "gpu_model__name",
        )
        .annotate(cents=Sum("billed_cents"), secs=Sum("priced_seconds"))
        .order_by()
    )
    lines = [_line(row) for row in rows]
    lines.sort(key=lambda line: line.sort)
    return lines


def _line(row: dict) -> Line:
    category, sku = row["pricing_category"], row["sku"]
    unit = "slice-hours" if ":" in sku else "GPU-hours"
    rsv = f"RSV-{row['reservation_id']}" if row["reservation_id"] else ""
    amount = pricing.from_cents(row["cents"])
    common = {
        "sku": sku, "pricing_category": category, "instance_id": row["instance_id"],
        "reservation_id": row["reservation_id"], "quantity": pricing.hours(row["secs"] or 0), "unit": unit,
        "unit_price": row["unit_price"], "amount": amount,
    }
    if row["charge_type"] == ChargeType.UNUSED_COMMITMENT:
        text = f"{rsv} {row['gpu_model__name']}: unused commitment"
        return Line(kind=LineKind.UNUSED_COMMITMENT, description=text, sort=(1, rsv), **common)
    what = CATEGORY_WORDS[category]
    if category == PricingCategory.COMMITTED:
        what = f"Reserved ({rsv})"
    elif category == PricingCategory.STANDARD and row["instance__pricing_model"] == "reserved":
        what = "On-demand, beyond reservations"
    elif category == PricingCategory.DYNAMIC and row["unit_price"] == 0:
        what = "Spot, preempted in its first hour: free"
    text = f"{row['instance__name']} · {sku} · {what}"
    return Line(kind=LineKind.USAGE, description=text, sort=(0, row["instance__name"], category, text), **common)


def correction_lines(team_id: int, month: date) -> list[Line]:
    """For each issued invoice of an earlier month: what its month costs now, less what
    was billed and already corrected, as one line (when not zero)."""
    issued = list(
        Invoice.objects.filter(team_id=team_id, status=InvoiceStatus.ISSUED, month__lt=month).order_by("month")
    )
    if not issued:
        return []
    now_cents = dict(
        Charge.objects.filter(team_id=team_id, month__in=[i.month for i in issued])
        .values("month")
        .annotate(c=Sum("billed_cents"))
        .values_list("month", "c")
    )
    corrected = defaultdict(Decimal)
    for refers, amount in InvoiceLine.objects.filter(
        refers_to__in=issued, kind=LineKind.CORRECTION, invoice__status=InvoiceStatus.ISSUED
    ).values_list("refers_to_id", "amount"):
        corrected[refers] += amount
    lines = []
    for inv in issued:
        delta = pricing.from_cents(now_cents.get(inv.month)) - inv.subtotal - corrected[inv.pk]
        if delta:
            text = f"Correction to {inv.number} ({inv.month:%B %Y}): usage re-metered after issue"
            lines.append(Line(kind=LineKind.CORRECTION, description=text, amount=delta, refers_to_id=inv.pk))
    return lines


def write(invoice: Invoice, lines: list[Line]) -> None:
    invoice.lines.all().delete()
    InvoiceLine.objects.bulk_create(
        InvoiceLine(
            invoice=invoice, position=i, kind=ln.kind, description=ln.description[:200], sku=ln.sku,
            pricing_category=ln.pricing_category, instance_id=ln.instance_id, reservation_id=ln.reservation_id,
            refers_to_id=ln.refers_to_id, quantity=ln.quantity, unit=ln.unit, unit_price=ln.unit_price,
            amount=ln.amount,
        )
        for i, ln in enumerate(lines, start=1)
    )
    usage = sum((ln.amount for ln in lines if ln.kind in (LineKind.USAGE, LineKind.UNUSED_COMMITMENT)), Decimal("0.00"))
    other = sum((ln.amount for ln in lines if ln.kind in (LineKind.CORRECTION, LineKind.ADJUSTMENT)), Decimal("0.00"))
    invoice.subtotal, invoice.adjustments, invoice.total = usage, other, usage + other
