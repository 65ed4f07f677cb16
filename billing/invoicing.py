"""Invoice lines from rated charges. Each usage line is the exact sum of its charges'
cents; corrections compare what an issued month costs now with what was billed."""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Sum

from console import bulk
from instances.models import GpuModel, Instance

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


def usage_lines(month: date, team_ids) -> dict[int, list[Line]]:
    """Each team's usage lines for ``month``, from its charges: one aggregate over the
    charges' own columns (names are looked up once, not grouped on)."""
    charges = Charge.objects.filter(team_id__in=list(team_ids), month=month)
    rows = (
        charges.values(
            "team_id", "instance_id", "reservation_id", "unit_price", "gpu_model_id", "charge_type",
            "pricing_category", "sku",
        )
        .annotate(cents=Sum("billed_cents"), secs=Sum("priced_seconds"))
        .order_by()
        .values_list(
            "team_id", "instance_id", "reservation_id", "unit_price", "gpu_model_id", "charge_type",
            "pricing_category", "sku", "cents", "secs",
        )
    )
    names = Instance.objects.filter(id__in=charges.values("instance_id")).order_by().values_list(
        "id", "name", "pricing_model")
    with _planned_for_many_rows():
        rows, names = bulk.fetch(rows), bulk.fetch(names)
    instances = {pk: (name, pricing_model) for pk, name, pricing_model in names}
    models = dict(GpuModel.objects.values_list("id", "name"))
    out: dict[int, list[Line]] = defaultdict(list)
    no_instance = (None, None)
    for team_id, instance_id, reservation_id, unit_price, model_id, charge_type, category, sku, cents, secs in rows:
        name, pricing_model = instances.get(instance_id, no_instance)
        out[team_id].append(_line({
            "instance_id": instance_id, "reservation_id": reservation_id, "unit_price": unit_price,
            "charge_type": charge_type, "pricing_category": category, "sku": sku, "cents": int(cents),
            "secs": int(secs or 0), "instance__name": name, "instance__pricing_model": pricing_model,
            "gpu_model__name": models[model_id],
        }))
    for lines in out.values():
        lines.sort(key=lambda line: line.sort)
    return out


@contextmanager
def _planned_for_many_rows():
    """Plan the reads inside as for a month's tens of thousands of charges. Right after
    a month is metered, in the same transaction, the planner's statistics still describe
    the table before (often empty): it would sort the charges to group them (and 4 MB of
    default sort memory sent them to disk) and look their instances up one at a time.
    Hashing both is 2–3× faster in the database at 33,000 charges (78 → 28 ms and
    29 → 15 ms; the month's lines, 145 → 120 ms in all). The settings are this
    transaction's own and are put back afterwards."""
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.vendor != "postgresql" or not connection.in_atomic_block:
        yield
        return
    names = ("work_mem", "enable_sort", "enable_nestloop")
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(f"current_setting('{n}')" for n in names))
        before = cursor.fetchone()
        cursor.execute("SELECT set_config('work_mem', '64MB', true), set_config('enable_sort', 'off', true), "
                       "set_config('enable_nestloop', 'off', true)")
    yield
    with connection.cursor() as cursor:  # not after an error: the transaction's rollback undoes them
        cursor.execute("SELECT " + ", ".join(f"set_config('{n}', %s, true)" for n in names), before)


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
    elif row["instance__pricing_model"] == "idle":
        what = "Idle capacity (low-priority job)"
    elif category == PricingCategory.DYNAMIC and row["unit_price"] == 0:
        what = "Spot, preempted in its first hour: free"
    text = f"{row['instance__name']} · {sku} · {what}"
    # Lines that read the same (one instance at two prices in a month) go by instance,
    # then by price.
    price = row["unit_price"]
    tie = (row["instance_id"], price is None, price or 0)
    return Line(kind=LineKind.USAGE, description=text, sort=(0, row["instance__name"], category, text, *tie), **common)


def correction_lines(month: date, team_ids, *, after: dict[int, date] | None = None) -> dict[int, list[Line]]:
    """For each issued invoice of an earlier month (and, for a team in ``after``, later
    than the month given there): what its month costs now, less what was billed and
    already corrected, as one line (when not zero)."""
    after = after or {}
    issued = [
        i for i in Invoice.objects.filter(team_id__in=list(team_ids), status=InvoiceStatus.ISSUED, month__lt=month)
        .order_by("team_id", "month")
        if i.team_id not in after or i.month > after[i.team_id]
    ]
    if not issued:
        return {}
    now_cents = {
        (t, m): c
        for t, m, c in Charge.objects.filter(team_id__in={i.team_id for i in issued}, month__in={i.month for i in issued})
        .values("team_id", "month")
        .annotate(c=Sum("billed_cents"))
        .values_list("team_id", "month", "c")
    }
    corrected = defaultdict(Decimal)
    for refers, amount in InvoiceLine.objects.filter(
        refers_to__in=issued, kind=LineKind.CORRECTION, invoice__status=InvoiceStatus.ISSUED
    ).values_list("refers_to_id", "amount"):
        corrected[refers] += amount
    out: dict[int, list[Line]] = defaultdict(list)
    for inv in issued:
        delta = pricing.from_cents(now_cents.get((inv.team_id, inv.month))) - inv.subtotal - corrected[inv.pk]
        if delta:
            text = f"Correction to {inv.number} ({inv.month:%B %Y}): usage re-metered after issue"
            out[inv.team_id].append(Line(kind=LineKind.CORRECTION, description=text, amount=delta, refers_to_id=inv.pk))
    return out


LINE_FIELDS = ("position", "kind", "description", "sku", "pricing_category", "instance_id", "reservation_id",
               "refers_to_id", "quantity", "unit", "unit_price", "amount")


def write(drafts: list[tuple[Invoice, list[Line]]], now) -> None:
    """Replace the lines of each draft and set its totals: a few queries for any number.
    A draft whose lines come out exactly as they are (refreshed again with nothing new
    metered, as when a month is issued right after metering) keeps them."""
    stored = defaultdict(list)
    for invoice_id, *values in bulk.fetch(
        InvoiceLine.objects.filter(invoice__in=[inv for inv, _ in drafts])
        .order_by("invoice_id", "position")
        .values_list("invoice_id", *LINE_FIELDS)
    ):
        stored[invoice_id].append(tuple(values))
    changed, moved, rows = [], [], []
    for invoice, lines in drafts:
        new = [
            (i, ln.kind, ln.description[:200], ln.sku, ln.pricing_category, ln.instance_id, ln.reservation_id,
             ln.refers_to_id, ln.quantity, ln.unit, ln.unit_price, ln.amount)
            for i, ln in enumerate(lines, start=1)
        ]
        if new != stored.get(invoice.pk, []):
            changed.append(invoice)
            rows += [(invoice.pk, *line) for line in new]
        usage = sum((ln.amount for ln in lines if ln.kind in (LineKind.USAGE, LineKind.UNUSED_COMMITMENT)), Decimal("0.00"))
        other = sum((ln.amount for ln in lines if ln.kind in (LineKind.CORRECTION, LineKind.ADJUSTMENT)), Decimal("0.00"))
        if (invoice.subtotal, invoice.adjustments, invoice.total) != (usage, other, usage + other):
            invoice.subtotal, invoice.adjustments, invoice.total = usage, other, usage + other
            moved.append(invoice)
        invoice.updated_at = now
    if changed:
        InvoiceLine.objects.filter(invoice__in=changed).delete()
    bulk.copy(InvoiceLine, ("invoice_id", *LINE_FIELDS), rows)
    # Every draft was refreshed now; only those whose totals moved are written in full.
    Invoice.objects.filter(pk__in=[inv.pk for inv, _ in drafts]).update(updated_at=now)
    Invoice.objects.bulk_update(moved, ["subtotal", "adjustments", "total"], batch_size=500)
