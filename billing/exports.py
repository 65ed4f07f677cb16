"""Exports of rated charges as CSV or FOCUS 1.2 columns, streamed: rows come from a
database iterator and leave as text in chunks, so memory does not grow with the range.
One row per charge (instance or reservation, UTC day, price), then one per credit,
adjustment or correction on the invoices of the months in range. BilledCost is the same
cent-rounded amount invoices add up, so an export of a month sums to its invoice."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings

from audit.recording import record_event
from console.models import Team

from . import pricing
from .models import (
    ChargeType,
    Invoice,
    InvoiceLine,
    InvoiceStatus,
    LineKind,
    PricingCategory,
    currency,
)

CHUNK_ROWS = 500
QUANTITY = Decimal("0.000001")

FOCUS_COLUMNS = [
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency", "PricingCurrency",
    "BillingAccountId", "BillingAccountName", "BillingAccountType", "BillingPeriodStart", "BillingPeriodEnd",
    "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodStart", "ChargePeriodEnd",
    "PricingCategory", "PricingQuantity", "PricingUnit", "ListUnitPrice", "ContractedUnitPrice",
    "ConsumedQuantity", "ConsumedUnit",
    "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountCategory", "CommitmentDiscountType",
    "CommitmentDiscountStatus", "CommitmentDiscountQuantity", "CommitmentDiscountUnit",
    "InvoiceId", "InvoiceIssuerName", "ProviderName", "PublisherName",
    "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceCategory", "ServiceName", "ServiceSubcategory", "SkuId", "SkuPriceId", "SkuMeter",
    "SubAccountId", "SubAccountName", "SubAccountType", "Tags", "x_PricingModel", "x_Note",
    "x_EnergyKWh", "x_CarbonKgCO2e",
]
CSV_COLUMNS = [
    "charge_period_start", "charge_period_end", "team", "instance_id", "instance", "reservation", "sku", "region",
    "pricing_category", "charge_type", "consumed_hours", "billed_hours", "unit_price", "list_unit_price",
    "list_cost", "billed_cost", "currency", "note",
]
FIELDS = [
    "id", "team_id", "team__name", "team__slug", "instance_id", "instance__name", "instance__pricing_model",
    "instance__labels",
    "reservation_id", "reservation__gpu_count", "reservation__term", "sku", "region", "month", "period_start",
    "period_end", "charge_type", "pricing_category", "consumed_seconds", "priced_seconds", "unit_price",
    "list_unit_price", "list_cents", "billed_cents", "note",
]
FOCUS_PRICING = {
    PricingCategory.STANDARD: "Standard",
    PricingCategory.COMMITTED: "Committed",
    PricingCategory.DYNAMIC: "Dynamic",
}


# Energy and carbon per charge row come from telemetry, which billing does not read:
# the app that measures them registers a function {charge id: (kWh, kg CO2e or None)},
# and one that totals the kWh of the same rows another way (for reconcile_costs).
_energy_source = None
_energy_total = None


def register_energy(source, total=None) -> None:
    global _energy_source, _energy_total
    _energy_source, _energy_total = source, total


def energy_rows(qs) -> list[dict]:
    return list(qs.filter(instance__isnull=False).values(
        "id", "instance_id", "period_start", "period_end", "consumed_seconds").order_by())


def billed_energy_kwh(qs) -> float | None:
    """The registered total for the charges of ``qs`` (None: nothing registered)."""
    return None if _energy_total is None else _energy_total(energy_rows(qs))


def _energy(qs) -> dict:
    if _energy_source is None:
        return {}
    return _energy_source(energy_rows(qs))


def _energy_cells(found) -> list[str]:
    if found is None:
        return ["", ""]
    kwh, kg = found
    return [f"{kwh:.6f}", "" if kg is None else f"{kg:.6f}"]


class _Echo:
    def write(self, value):
        return value


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hours(seconds: int) -> str:
    return str((Decimal(seconds) / pricing.SECONDS_PER_HOUR).quantize(QUANTITY, rounding=ROUND_HALF_UP))


def stream(qs, fmt: str, invoices=None) -> Iterator[str]:
    """CSV text, header first, in chunks of ``CHUNK_ROWS`` rows: the charges of ``qs``,
    then the credits, adjustments and corrections on ``invoices`` (the invoices of the
    same teams whose months start in the range)."""
    writer = csv.writer(_Echo(), lineterminator="\n")
    columns, build, build_line = (
        (FOCUS_COLUMNS, _focus_row, _focus_line) if fmt == "focus" else (CSV_COLUMNS, _csv_row, _csv_line)
    )
    yield writer.writerow(columns)
    if fmt == "focus":
        energy = _energy(qs)
        build = lambda row, numbers: _focus_row(row, numbers) + _energy_cells(energy.get(row["id"]))  # noqa: E731
    numbers = _invoice_numbers(qs, invoices)
    chunk = []
    rows = qs.order_by("period_start", "team_id", "id").values(*FIELDS)
    for row in rows.iterator(chunk_size=2000):
        chunk.append(writer.writerow(build(row, numbers)))
        if len(chunk) >= CHUNK_ROWS:
            yield "".join(chunk)
            chunk = []
    for line in _credit_lines(invoices):
        chunk.append(writer.writerow(build_line(line)))
    if chunk:
        yield "".join(chunk)


def _invoice_numbers(qs, invoices) -> dict:
    months = qs.values("team_id", "month").distinct().order_by()
    teams = {m["team_id"] for m in months}
    issued = Invoice.objects.filter(team_id__in=teams, status=InvoiceStatus.ISSUED)
    if invoices is not None:
        issued = issued | invoices.filter(status=InvoiceStatus.ISSUED)
    return {(t, m): n for t, m, n in issued.values_list("team_id", "month", "number")}


def _credit_lines(invoices) -> Iterable[dict]:
    if invoices is None:
        return []
    return (
        InvoiceLine.objects.filter(invoice__in=invoices, kind__in=[LineKind.ADJUSTMENT, LineKind.CORRECTION])
        .order_by("invoice__month", "invoice__team_id", "position")
        .values("kind", "description", "amount", "invoice__status", "invoice__number", "invoice__month",
                "invoice__team__name", "invoice__team__slug", "refers_to__number")
    )


def _line_category(line: dict) -> str:
    """FOCUS ChargeCategory of an invoice line: a negative adjustment is a Credit."""
    return "Credit" if line["kind"] == LineKind.ADJUSTMENT and line["amount"] < 0 else "Adjustment"


def _csv_line(line: dict) -> list:
    start = pricing.month_start(line["invoice__month"])
    return [
        _iso(start), _iso(pricing.next_month(start)), line["invoice__team__name"], "", "", "", "", "", "",
        _line_category(line).lower() if line["kind"] == LineKind.ADJUSTMENT else "correction", "", "", "", "",
        "0.00", line["amount"], currency(), line["description"],
    ]


def _focus_line(line: dict) -> list:
    start = pricing.month_start(line["invoice__month"])
    provider = getattr(settings, "BILLING_PROVIDER_NAME", "GPU Console")
    correction = line["kind"] == LineKind.CORRECTION
    number = line["invoice__number"] if line["invoice__status"] == InvoiceStatus.ISSUED else ""
    amount = line["amount"]
    values = {
        "BilledCost": amount, "EffectiveCost": amount, "ListCost": "0.00", "ContractedCost": "0.00",
        "BillingCurrency": currency(), "PricingCurrency": currency(),
        "BillingAccountId": getattr(settings, "BILLING_ACCOUNT_ID", "gpu-console"), "BillingAccountName": provider,
        "BillingAccountType": "Billing Account", "BillingPeriodStart": _iso(start),
        "BillingPeriodEnd": _iso(pricing.next_month(start)), "ChargeCategory": _line_category(line),
        "ChargeClass": "Correction" if correction else "", "ChargeDescription": line["description"],
        "ChargeFrequency": "One-Time", "ChargePeriodStart": _iso(start), "ChargePeriodEnd": _iso(pricing.next_month(start)),
        "InvoiceId": number, "InvoiceIssuerName": provider, "ProviderName": provider, "PublisherName": provider,
        "ServiceCategory": "Compute", "ServiceName": "GPU Instances", "ServiceSubcategory": "Virtual Machines",
        "SubAccountId": line["invoice__team__slug"], "SubAccountName": line["invoice__team__name"],
        "SubAccountType": "Team", "Tags": "{}", "x_Note": f"corrects {line['refers_to__number']}" if correction else "",
    }
    return [values.get(column, "") for column in FOCUS_COLUMNS]


def _tags(labels) -> str:
    return json.dumps(labels or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _csv_row(row: dict, invoices: dict) -> list:
    return [
        _iso(row["period_start"]), _iso(row["period_end"]), row["team__name"], row["instance_id"] or "",
        row["instance__name"] or "", f"RSV-{row['reservation_id']}" if row["reservation_id"] else "", row["sku"],
        row["region"], row["pricing_category"], row["charge_type"], _hours(row["consumed_seconds"]),
        _hours(row["priced_seconds"]), row["unit_price"] if row["unit_price"] is not None else "",
        row["list_unit_price"], pricing.from_cents(row["list_cents"]), pricing.from_cents(row["billed_cents"]),
        currency(), row["note"],
    ]


def _focus_row(row: dict, invoices: dict) -> list:
    unused = row["charge_type"] == ChargeType.UNUSED_COMMITMENT
    committed = row["pricing_category"] == PricingCategory.COMMITTED
    slice_sku = ":" in row["sku"]
    unit = "Slice-Hours" if slice_sku else "GPU-Hours"
    billed = pricing.from_cents(row["billed_cents"])
    listed = pricing.from_cents(row["list_cents"])
    rsv = f"RSV-{row['reservation_id']}" if row["reservation_id"] else ""
    month_start = pricing.month_start(row["month"])
    provider = getattr(settings, "BILLING_PROVIDER_NAME", "GPU Console")
    if unused:
        resource = (rsv, f"{row['reservation__gpu_count']} × {row['sku']} reservation", "Reservation")
        description = f"Unused commitment of {rsv}"
    else:
        resource = (f"instance-{row['instance_id']}", row["instance__name"], "GPU Instance")
        description = f"{row['sku']} {FOCUS_PRICING[row['pricing_category']].lower()} usage"
    rsv_name = f"{row['reservation__gpu_count']} × {row['sku']} ({row['reservation__term']})" if rsv else ""
    return [
        billed, billed, listed, listed, currency(), currency(),
        getattr(settings, "BILLING_ACCOUNT_ID", "gpu-console"), provider, "Billing Account",
        _iso(month_start), _iso(pricing.next_month(month_start)),
        "Usage", "", description, "Recurring" if unused else "Usage-Based",
        _iso(row["period_start"]), _iso(row["period_end"]),
        FOCUS_PRICING[row["pricing_category"]], _hours(row["priced_seconds"]), unit,
        row["list_unit_price"], row["list_unit_price"],
        "" if unused else _hours(row["consumed_seconds"]), "" if unused else unit,
        rsv if committed else "", rsv_name if committed else "", "Usage" if committed else "",
        "Reservation" if committed else "", ("Unused" if unused else "Used") if committed else "",
        _hours(row["priced_seconds"]) if committed else "", unit if committed else "",
        invoices.get((row["team_id"], row["month"]), ""), provider, provider, provider,
        row["region"], row["region"], *resource,
        "Compute", "GPU Instances", "Virtual Machines", row["sku"],
        f"{row['sku']}:{row['pricing_category']}:{row['unit_price'] if row['unit_price'] is not None else 'spot'}",
        unit.replace("-", " "),
        row["team__slug"], row["team__name"], "Team", _tags(row["instance__labels"]),
        row["instance__pricing_model"] or "reserved", row["note"],
    ]


def record_export(*, actor, fmt: str, start: datetime, end: datetime, team: Team | None) -> None:
    record_event(actor=actor, action="billing.export", team=team, target_type="billing.charge",
                 details={"format": fmt, "start": start, "end": end, "team": team.name if team else "all"})
