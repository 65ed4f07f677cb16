from datetime import date
from decimal import Decimal

import pytest
from billing_support import at, months_ahead
from django.test import Client
from django.utils import timezone

from billing import meter_runs, price_changes, pricing, reservations
from billing.models import Budget, Charge, Invoice


@pytest.fixture
def browse(db):
    def _browse(user):
        client = Client()
        client.force_login(user)
        return client

    return _browse


@pytest.fixture
def november(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 10), at(3, 12), "terminate")])
    meter(now=at(2, month=12))
    meter_runs.issue_due_invoices(now=at(2, month=12))
    return Invoice.objects.get(number="ACME-202611")


def test_an_admin_sees_costs_budget_and_the_bill(november, browse, alice):
    page = browse(alice).get("/costs/?month=2026-11").content.decode()
    assert "4.00" in page and 'id="card-budget"' in page and "ACME-202611" in page and "FOCUS export" in page
    assert "plotly/plotly.min.js" in page and 'id="cost-figures"' in page


def test_a_member_sees_costs_without_the_bill(november, browse, bob):
    page = browse(bob).get("/costs/?month=2026-11").content.decode()
    assert "4.00" in page
    assert 'id="card-bill"' not in page and 'id="card-budget"' not in page and "ACME-202611" not in page


def test_an_outsider_cannot_pick_another_team(november, browse, charlie, acme):
    assert browse(charlie).get(f"/costs/?team={acme.pk}").status_code == 403


def test_invoice_pages_and_the_printable_version(november, browse, alice):
    client = browse(alice)
    assert "ACME-202611" in client.get("/invoices/").content.decode()
    detail = client.get(f"/invoices/{november.pk}/").content.decode()
    assert "job · H100-80GB · On-demand" in detail and "4.00 USD" in detail
    printable = client.get(f"/invoices/{november.pk}/print/").content.decode()
    assert "Invoice ACME-202611" in printable and "base.html" not in printable and "topbar" not in printable


def test_another_teams_invoice_page_is_a_404(november, browse, charlie):
    assert browse(charlie).get(f"/invoices/{november.pk}/").status_code == 404
    assert browse(charlie).get(f"/invoices/{november.pk}/print/").status_code == 404


def test_members_have_no_invoice_or_budget_pages(november, browse, bob):
    assert browse(bob).get("/invoices/").status_code == 403
    assert browse(bob).get("/budgets/").status_code == 403


def test_an_admin_sets_a_budget_on_the_page(browse, alice, acme):
    response = browse(alice).post("/budgets/", {"team": acme.pk, "month": months_ahead(2), "amount": "900",
                                                "actual_thresholds": "50, 100", "forecast_thresholds": ""})
    assert response.status_code == 302
    assert acme.budgets.get().actual_thresholds == [50, 100]


def test_a_bad_budget_on_the_page_names_the_field(browse, alice, acme):
    response = browse(alice).post("/budgets/", {"team": acme.pk, "month": "2020-01", "amount": "900",
                                                "actual_thresholds": "50", "forecast_thresholds": ""})
    assert response.status_code == 400 and "That month is over" in response.content.decode()


@pytest.mark.parametrize("month", ["9999-12", "1999-12", "2026-13", "abc", "2026"])
def test_the_cost_page_names_a_month_it_cannot_show(browse, alice, acme, month):
    response = browse(alice).get("/costs/", {"month": month})
    assert response.status_code == 400 and "Give the month as YYYY-MM, between 2000 and 2199." in response.content.decode()


def test_a_budget_for_year_9999_is_refused_and_the_page_still_lists(browse, alice, acme):
    response = browse(alice).post("/budgets/", {"team": acme.pk, "month": "9999-12", "amount": "900",
                                                "actual_thresholds": "50", "forecast_thresholds": ""})
    assert response.status_code == 400 and "within the next 12 months" in response.content.decode()
    assert browse(alice).get("/budgets/").status_code == 200


def test_a_budget_stored_for_9999_before_months_were_bounded_still_lists(browse, alice, acme):
    Budget.objects.create(team=acme, month=date(9999, 12, 1), amount=Decimal("900"), currency="USD",
                          actual_thresholds=[50], forecast_thresholds=[])
    page = browse(alice).get("/budgets/")
    assert page.status_code == 200 and "December 9999" in page.content.decode()


def test_an_admin_reserves_on_the_page(prices, browse, alice, acme):
    response = browse(alice).post("/reservations/", {"team": acme.pk, "gpu_model": "H100-80GB", "gpu_count": "2",
                                                     "term": "1y", "start": "2030-01-01T00:00"})
    assert response.status_code == 302 and acme.reservations.get().gpu_count == 2


def test_an_operator_sets_a_spot_price_on_the_page(prices, browse, ops, bob):
    assert browse(ops).post("/prices/", {"set_spot": "1", "sku": "H100-80GB", "hourly": "0.99"}).status_code == 302
    assert browse(bob).post("/prices/", {"set_spot": "1", "sku": "H100-80GB", "hourly": "0.01"}).status_code == 403
    assert "<td class=\"num mono\">0.99</td>" in browse(bob).get("/prices/").content.decode()


def test_the_reservations_page_says_why_a_reservation_costs_what_it_does(client, alice, acme, prices):
    from billing_support import at

    from instances.models import GpuModel

    reservations.purchase_reservation(actor=alice, team=acme, gpu_model=GpuModel.objects.get(name="H100-80GB"),
                                  gpu_count=2, term="1y", start=at(1), now=at(1))
    client.force_login(alice)
    assert "60% of the 2.00/h on-demand price when it started" in client.get("/reservations/").content.decode()


def test_operators_see_unrated_usage_on_the_prices_page(client, ops, alice, play, bob, acme, meter):
    from billing_support import at

    from billing.models import Price

    play(bob, acme, runs=[(at(3, 10), at(3, 12), "terminate")], model="H200-141GB")
    Price.objects.filter(sku="H200-141GB").delete()
    meter()
    client.force_login(ops)
    page = client.get("/prices/").content.decode()
    assert 'id="unrated-usage"' in page
    # How to bill it once priced, from the first day held.
    assert "python manage.py meter --start 2026-11-03" in page
    client.force_login(alice)
    assert 'id="unrated-usage"' not in client.get("/prices/").content.decode()


def test_the_prices_page_shows_the_idle_capacity_price(prices, browse, ops, bob):
    page = browse(bob).get("/prices/").content.decode()
    assert "Idle capacity</th>" in page and "not offered" in page  # no idle price set yet
    since = at(1)
    price_changes.set_price(actor=ops, sku="H100-80GB", kind="idle", hourly="0.4", effective_from=since, now=since)
    row = next(r for r in browse(bob).get("/prices/").content.decode().split("<tr>") if "H100-80GB</td>" in r)
    assert row.endswith('<td class="num mono">0.40</td></tr>')


def test_a_memo_too_long_is_refused_on_the_page_not_cut(play, meter, bob, acme, browse, alice):
    play(bob, acme, runs=[(at(3, 10), at(3, 12), "terminate")])
    meter(now=at(2, month=12))
    invoice = Invoice.objects.get(team=acme, month=at(1).date())
    assert not invoice.is_issued
    response = browse(alice).post(f"/invoices/{invoice.pk}/memo/", {"memo": "P" * 299}, follow=True)
    assert "A memo is at most 200 characters; this one has 299." in response.content.decode()
    invoice.refresh_from_db()
    assert invoice.memo == ""
    browse(alice).post(f"/invoices/{invoice.pk}/memo/", {"memo": "P" * 200})
    invoice.refresh_from_db()
    assert invoice.memo == "P" * 200


def test_the_budget_form_picks_the_only_team_and_asks_an_operator(browse, alice, acme, globex, ops):
    alices = browse(alice).get("/budgets/").context["form"]
    assert alices.fields["team"].empty_label is None and list(alices.fields["team"].queryset) == [acme]
    assert browse(ops).get("/budgets/").context["form"].fields["team"].empty_label == "---------"


def test_the_overview_shows_the_cost_explorers_month_to_date_in_the_deployments_currency(
        browse, bob, acme, acme_instance, settings):
    settings.BILLING_CURRENCY = "EUR"
    day = pricing.floor_day(timezone.now())
    Charge.objects.create(team=acme, instance=acme_instance, gpu_model=acme_instance.gpu_model, sku="H100-80GB",
                          month=day.date().replace(day=1), period_start=day, period_end=day + pricing.DAY,
                          charge_type="usage", pricing_category="standard", consumed_seconds=3600,
                          priced_seconds=3600, unit_price=Decimal("1234.56"), list_unit_price=Decimal("1234.56"),
                          list_cents=123456, billed_cents=123456)
    client = browse(bob)
    explorer = client.get("/costs/").content.decode()
    overview = client.get("/").content.decode()
    card = overview[overview.index(f'data-cost-team="{acme.pk}"'):].split("</div></div>", 1)[0]
    spent = explorer[explorer.index('id="card-spent"'):].split("</div>", 2)[1]
    figure = client.get("/").context["teams"][0]["cost"]
    assert figure >= Decimal("1234.56")
    shown = f"{figure:,.2f}"  # the same figure, with thousands separators, on both pages
    assert f"{shown}<small> EUR</small>" in card, card
    assert f"{shown} <span class=\"unit\">EUR</span>" in spent, spent
    assert "$" not in card
