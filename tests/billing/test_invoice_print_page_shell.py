"""The printable invoice stands alone (no console shell), yet names its icon like every
console page, so the browser never asks for /favicon.ico (a 404); and an unused
commitment reads as the charged line it is, not greyed out."""

from billing_support import at
from django.contrib.staticfiles import finders

from billing import meter_runs
from billing.models import Invoice


def test_the_print_page_names_its_icon(play, meter, bob, alice, acme, client):
    play(bob, acme, runs=[(at(3, 10), at(3, 12), "terminate")])
    meter(now=at(2, month=12))
    meter_runs.issue_due_invoices(now=at(2, month=12))
    client.force_login(alice)
    invoice = Invoice.objects.get(number="ACME-202611")
    page = client.get(f"/invoices/{invoice.pk}/print/").content.decode()
    assert '<link rel="icon"' in page


def test_no_stylesheet_greys_out_an_unused_commitment():
    for name in ("billing/billing.css", "billing/print.css"):
        path = finders.find(name)
        if path:
            assert "unused_commitment" not in open(path).read(), name
