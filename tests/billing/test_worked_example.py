"""The month worked out by hand in docs/billing.md, line by line."""

from datetime import timedelta
from decimal import Decimal

import pytest
from billing_support import DEC, NOV, at

from billing import meter_runs, price_changes, reservations
from billing.models import Invoice
from instances.models import GpuModel

EXPECTED = [
    ("long · H200-141GB · On-demand", "720.0000", "2592.00"),
    ("notebook · A100-80GB:mig:1g.10gb · On-demand", "8.0000", "1.44"),
    ("probe · H100-80GB · On-demand", "0.0225", "0.05"),
    ("smoke · H100-80GB · On-demand", "0.0167", "0.03"),
    ("spot-batch · H100-80GB · Spot", "24.0000", "20.16"),
    ("spot-sweep · H100-80GB · Spot, preempted in its first hour: free", "1.3333", "0.00"),
    ("train · H100-80GB · Reserved (RSV-{r})", "96.0000", "115.20"),
    ("train · H100-80GB · On-demand, beyond reservations", "96.0000", "192.00"),
    ("web · H100-80GB · On-demand", "24.0000", "48.00"),
    ("RSV-{r} H100-80GB: unused commitment", "1344.0000", "1612.80"),
]


@pytest.fixture
def november(play, alice, bob, acme, ops, fleet):
    reservation = reservations.purchase_reservation(
        actor=alice, team=acme, gpu_model=GpuModel.objects.get(name="H100-80GB"), gpu_count=2, term="1y",
        start=NOV, now=NOV - timedelta(days=1),
    )
    play(bob, acme, "long", [(at(30, month=10), at(1, 12, month=12), "terminate")], model="H200-141GB")
    play(bob, acme, "notebook", [(at(3, 9), at(3, 17), "stop")], model="A100-80GB", slice_profile=fleet["mig"])
    play(bob, acme, "smoke", [(at(5, 12), at(5, 12, 0, 20), "terminate")])
    play(bob, acme, "probe", [(at(6, 12), at(6, 12, 1, 21), "terminate")])
    play(bob, acme, "web", [(at(20, 18), at(21, 6), "terminate")], count=2)
    play(bob, acme, "spot-sweep", [(at(15, 10), at(15, 10, 40), "preempt")], count=2, pricing="spot")
    price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly=Decimal("0.90"), now=at(25, 2))
    play(bob, acme, "spot-batch", [(at(25, 0), at(25, 6), "terminate")], count=4, pricing="spot")
    play(bob, acme, "train", [(at(10, 0), at(12, 0), "terminate")], count=4, pricing="reserved")
    meter_runs.meter_window(actor=ops, start=NOV, end=DEC, now=at(2, month=12))
    meter_runs.issue_due_invoices(now=at(2, month=12))
    return reservation


def test_november_is_the_invoice_worked_out_by_hand(november, acme):
    invoice = Invoice.objects.get(team=acme, month=NOV.date())
    lines = [(line.description, str(line.quantity), str(line.amount)) for line in invoice.lines.all()]
    expected = [(d.format(r=november.pk), q, a) for d, q, a in EXPECTED]
    assert lines == expected
    assert (invoice.status, invoice.number, invoice.total) == ("issued", "ACME-202611", Decimal("4581.68"))


def test_the_reservation_is_billed_for_every_second_of_the_month(november, acme):
    invoice = Invoice.objects.get(team=acme, month=NOV.date())
    reserved = [line.amount for line in invoice.lines.filter(reservation=november)]
    assert sum(reserved) == Decimal("1.20") * 2 * 720
