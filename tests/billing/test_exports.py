import csv
import io
from decimal import Decimal

import pytest
from billing_support import at

from audit.models import AuditEvent
from billing import exports, meter_runs, reservations
from billing.models import Invoice
from instances.models import GpuModel


@pytest.fixture
def november(play, meter, bob, alice, acme, ops):
    reservations.purchase_reservation(actor=alice, team=acme, gpu_model=GpuModel.objects.get(name="H100-80GB"),
                                  gpu_count=1, term="1y", start=at(29), now=at(1))
    play(bob, acme, "od", runs=[(at(3, 10), at(3, 12), "terminate")])
    play(bob, acme, "sp", runs=[(at(4, 10), at(4, 12), "terminate")], pricing="spot")
    play(bob, acme, "rs", runs=[(at(29, 10), at(29, 12), "terminate")], count=2, pricing="reserved")
    meter(now=at(2, month=12))
    return meter_runs.issue_due_invoices(now=at(2, month=12))[0]


def _rows(response):
    assert response.streaming
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_the_focus_export_reconciles_to_the_invoice_to_the_cent(november, api, alice):
    # 4.00 on-demand + 1.44 spot + 57.60 commitment (48 h × 1.20) + 4.00 beyond it
    rows = _rows(api(alice).get("/api/v1/costs/export/?format=focus&start=2026-11-01&end=2026-12-01"))
    assert list(rows[0]) == exports.FOCUS_COLUMNS
    assert sum(Decimal(r["BilledCost"]) for r in rows) == november.total == Decimal("67.04")
    assert {r["InvoiceId"] for r in rows} == {"ACME-202611"}


def test_focus_pricing_categories_and_commitment_columns(november, api, alice):
    rows = _rows(api(alice).get("/api/v1/costs/export/?format=focus&start=2026-11-01&end=2026-12-01"))
    by = {(r["ResourceName"], r["PricingCategory"], r["CommitmentDiscountStatus"]) for r in rows}
    assert {("od", "Standard", ""), ("sp", "Dynamic", ""), ("rs", "Committed", "Used"), ("rs", "Standard", "")} <= by
    unused = [r for r in rows if r["CommitmentDiscountStatus"] == "Unused"]
    assert unused and all(r["ConsumedQuantity"] == "" and r["CommitmentDiscountId"].startswith("RSV-") for r in unused)
    od = next(r for r in rows if r["ResourceName"] == "od")
    assert (od["ListUnitPrice"], od["PricingQuantity"], od["PricingUnit"], od["ChargePeriodStart"]) == (
        "2.000000", "2.000000", "GPU-Hours", "2026-11-03T00:00:00Z")
    assert (od["BillingPeriodStart"], od["BillingPeriodEnd"], od["SubAccountName"]) == (
        "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "Acme")


def test_the_csv_export_has_one_row_per_charge(november, api, alice):
    rows = _rows(api(alice).get("/api/v1/costs/export/?format=csv&start=2026-11-01&end=2026-12-01"))
    assert list(rows[0]) == exports.CSV_COLUMNS
    assert sum(Decimal(r["billed_cost"]) for r in rows) == Decimal("67.04")


def test_an_export_is_audited(november, api, alice):
    api(alice).get("/api/v1/costs/export/?format=csv&start=2026-11-01&end=2026-12-01")
    event = AuditEvent.objects.get(action="billing.export")
    assert (event.actor_name, event.details["format"]) == ("alice", "csv")


def test_an_export_streams_in_chunks(november, api, alice, monkeypatch):
    monkeypatch.setattr(exports, "CHUNK_ROWS", 2)
    response = api(alice).get("/api/v1/costs/export/?format=focus&start=2026-11-01&end=2026-12-01")
    chunks = list(response.streaming_content)
    assert len(chunks) > 3 and all(c.count(b"\n") <= 2 for c in chunks[1:])
    assert Invoice.objects.get(number="ACME-202611").total == Decimal("67.04")
