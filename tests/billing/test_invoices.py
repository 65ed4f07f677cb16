from decimal import Decimal

import pytest
from billing_support import DEC, NOV, at
from django.db import connection, transaction

from audit.models import AuditEvent
from billing import invoices, invoicing, meter_runs, reconcile
from billing.models import Invoice, InvoiceLine, Price, UnratedUsage


@pytest.fixture
def november(play, bob, acme, meter):
    play(bob, acme, runs=[(at(3, 10), at(3, 12, 30), "stop")], count=2)
    meter(now=at(2, month=12))
    return Invoice.objects.get(team=acme, month=NOV.date())


def test_a_draft_follows_usage_while_the_month_runs(play, bob, acme, meter):
    play(bob, acme, runs=[(at(3, 10), None, "")])
    meter(now=at(3, 12))
    invoice = Invoice.objects.get()
    assert (invoice.status, invoice.total) == ("draft", Decimal("4.00"))
    meter(now=at(3, 13))
    invoice.refresh_from_db()
    assert invoice.total == Decimal("6.00")


def test_the_month_end_task_issues_last_months_invoice(november, acme):
    issued = meter_runs.issue_due_invoices(now=at(2, month=12))
    assert [i.number for i in issued] == ["ACME-202611"]
    november.refresh_from_db()
    assert (november.status, november.total, november.issued_at) == ("issued", Decimal("10.00"), at(2, month=12))


def test_a_month_that_is_not_over_stays_draft(november, ops):
    with pytest.raises(invoices.BillingConflict, match="not over"):
        invoices.issue_invoice(actor=ops, invoice=november, now=at(30, 23))


def test_lines_add_up_exactly_to_the_total(november):
    assert sum(line.amount for line in november.lines.all()) == november.total


def test_a_refresh_with_nothing_new_keeps_the_lines_and_new_usage_replaces_them(november, play, bob, acme, meter):
    before = list(november.lines.values_list("id", "position", "description", "amount"))
    meter(now=at(2, month=12))
    assert list(november.lines.values_list("id", "position", "description", "amount")) == before
    play(bob, acme, "late", runs=[(at(20, 10), at(20, 11), "terminate")])
    meter(now=at(2, month=12))
    november.refresh_from_db()
    lines = list(november.lines.values_list("description", "amount"))
    assert november.total == Decimal("12.00") == sum(amount for _, amount in lines)
    assert [d.split(" ·")[0] for d, _ in lines] == ["job", "late"]


def test_an_issued_invoice_never_changes_when_usage_is_re_metered(november, play, bob, acme, meter):
    meter_runs.issue_due_invoices(now=at(2, month=12))
    late = play(bob, acme, "late", runs=[(at(20, 10), at(20, 11), "terminate")])
    meter(start=NOV, end=DEC, now=at(3, month=12))
    november.refresh_from_db()
    assert (november.total, november.lines.count()) == (Decimal("10.00"), 1)
    december = Invoice.objects.get(team=acme, month=DEC.date())
    correction = december.lines.get(kind="correction")
    assert (correction.amount, correction.refers_to_id) == (Decimal("2.00"), november.pk)
    assert late.pk


def test_a_correction_reaches_the_earliest_draft_as_soon_as_it_is_metered(november, play, bob, acme, meter):
    """Just after a month ends two drafts are open (the month before it issued, the month
    just over not yet): re-metering the issued month shows its correction at once on the
    draft that will carry it, not only when that draft is issued."""
    meter_runs.issue_due_invoices(now=at(2, month=12))
    play(bob, acme, "december", runs=[(at(5, 10, month=12), at(5, 11, month=12), "terminate")])
    january = at(2, month=1).replace(year=2027)
    meter(start=DEC, end=at(1, month=1).replace(year=2027), now=january)
    play(bob, acme, "late", runs=[(at(20, 10), at(20, 11), "terminate")])
    meter(start=NOV, end=DEC, now=january)
    december = Invoice.objects.get(team=acme, month=DEC.date())
    assert december.status == "draft"
    correction = december.lines.get(kind="correction")
    assert (correction.amount, correction.refers_to_id) == (Decimal("2.00"), november.pk)
    assert december.total == Decimal("4.00")
    assert InvoiceLine.objects.filter(kind="correction").count() == 1
    assert not Invoice.objects.filter(team=acme, month__year=2027).exists()


def test_a_correction_skips_a_draft_of_a_month_before_the_issued_one(november, play, bob, acme, meter):
    """An old month metered late opens a draft earlier than the issued month: the issued
    month's correction still lands on the earliest draft after it, at once, and once."""
    meter_runs.issue_due_invoices(now=at(2, month=12))
    play(bob, acme, "october", runs=[(at(20, 10, month=10), at(20, 11, month=10), "terminate")])
    play(bob, acme, "late", runs=[(at(20, 10), at(20, 11), "terminate")])
    meter(start=at(1, month=10), end=DEC, now=at(3, month=12))
    october = Invoice.objects.get(team=acme, month=at(1, month=10).date())
    december = Invoice.objects.get(team=acme, month=DEC.date())
    assert (october.status, october.total, october.lines.filter(kind="correction").count()) == ("draft", Decimal("2.00"), 0)
    correction = december.lines.get(kind="correction")
    assert (correction.amount, correction.refers_to_id, december.total) == (Decimal("2.00"), november.pk, Decimal("2.00"))
    meter_runs.issue_due_invoices(now=at(3, 1, month=12))  # October is issued in turn
    october.refresh_from_db()
    december.refresh_from_db()
    assert (october.status, october.total) == ("issued", Decimal("2.00"))
    assert december.total == Decimal("2.00")
    assert InvoiceLine.objects.filter(kind="correction").count() == 1


def test_a_draft_opened_for_an_older_month_takes_the_correction_over_from_a_later_one(play, bob, acme, meter):
    """September issued; November over but not issued yet, carrying September's
    correction; then October metered late opens a draft: the correction moves to it and
    leaves November, so that it is on one draft only, and every figure of September agrees."""
    sep, october = at(1, month=9), at(1, month=10)
    play(bob, acme, "sep", runs=[(at(3, 10, month=9), at(3, 12, month=9), "stop")])
    meter(start=sep, end=october, now=at(2, month=10))
    invoices.issue_months(actor="system", before=october.date(), now=at(2, month=10))
    play(bob, acme, "nov", runs=[(at(3, 10), at(3, 11), "stop")])
    just_over = DEC.replace(minute=30)
    meter(start=NOV, end=DEC, now=just_over)
    play(bob, acme, "late-sep", runs=[(at(20, 10, month=9), at(20, 11, month=9), "terminate")])
    meter(start=sep, end=october, now=just_over)
    issued = Invoice.objects.get(team=acme, month=sep.date())
    november = Invoice.objects.get(team=acme, month=NOV.date())
    assert november.lines.get(kind="correction").refers_to_id == issued.pk
    play(bob, acme, "late-oct", runs=[(at(20, 10, month=10), at(20, 11, month=10), "terminate")])
    meter(start=october, end=NOV, now=just_over)
    carrying = InvoiceLine.objects.filter(kind="correction", refers_to=issued)
    assert [(line.invoice.month, line.amount) for line in carrying] == [(october.date(), Decimal("2.00"))]
    november.refresh_from_db()
    assert november.total == Decimal("2.00") == sum(line.amount for line in november.lines.all())
    assert reconcile.check_month(acme, sep.date(), now=just_over).differences == []


def test_an_issued_month_whose_usage_can_no_longer_be_priced_is_corrected(november, acme, meter):
    """Re-metered without a price, the month's usage is held unrated and it has no
    charges left: its correction (all of it back) still reaches the current draft."""
    meter_runs.issue_due_invoices(now=at(2, month=12))
    Price.objects.filter(sku="H100-80GB").delete()
    meter(start=NOV, end=DEC, now=at(3, month=12))
    assert UnratedUsage.objects.filter(team=acme).exists()
    december = Invoice.objects.get(team=acme, month=DEC.date())
    correction = december.lines.get(kind="correction")
    assert (correction.amount, correction.refers_to_id, december.total) == (Decimal("-10.00"), november.pk,
                                                                          Decimal("-10.00"))


def test_a_correction_is_made_once(november, play, bob, acme, meter):
    meter_runs.issue_due_invoices(now=at(2, month=12))
    play(bob, acme, "late", runs=[(at(20, 10), at(20, 11), "terminate")])
    meter(start=NOV, end=DEC, now=at(3, month=12))
    meter_runs.issue_due_invoices(now=at(1, month=1).replace(year=2027))
    meter(start=NOV, end=DEC, now=at(2, month=1).replace(year=2027))
    january = Invoice.objects.filter(team=acme, month__year=2027).first()
    assert january is None or not january.lines.filter(kind="correction").exists()


def test_editing_an_issued_invoice_is_refused_and_audited(november, api, alice):
    meter_runs.issue_due_invoices(now=at(2, month=12))
    response = api(alice).patch(f"/api/v1/invoices/{november.pk}/", {"memo": "PO-1"})
    assert response.status_code == 409
    assert response.json()["code"] == "invoice_issued"
    assert AuditEvent.objects.filter(action="billing.invoice.edit", outcome="denied", team=november.team_id).count() == 1
    november.refresh_from_db()
    assert november.memo == ""


def test_deleting_an_issued_invoice_is_refused_and_audited(november, api, alice):
    meter_runs.issue_due_invoices(now=at(2, month=12))
    assert api(alice).delete(f"/api/v1/invoices/{november.pk}/").status_code == 409
    assert AuditEvent.objects.filter(action="billing.invoice.edit", outcome="denied").exists()
    assert Invoice.objects.filter(pk=november.pk).exists()


def test_adjusting_an_issued_invoice_is_refused_and_audited(november, api, ops):
    meter_runs.issue_due_invoices(now=at(2, month=12))
    response = api(ops).post(f"/api/v1/invoices/{november.pk}/adjustments/", {"amount": "-5.00", "reason": "goodwill"})
    assert response.status_code == 409
    assert AuditEvent.objects.filter(action="billing.invoice.edit", outcome="denied").exists()
    assert InvoiceLine.objects.filter(kind="adjustment").count() == 0


def test_an_admin_sets_a_drafts_memo(november, api, alice):
    response = api(alice).patch(f"/api/v1/invoices/{november.pk}/", {"memo": "PO-1"})
    assert (response.status_code, response.json()["memo"]) == (200, "PO-1")


def test_a_memo_too_long_is_refused_by_the_api_as_on_the_page(november, api, alice):
    response = api(alice).patch(f"/api/v1/invoices/{november.pk}/", {"memo": "P" * 201})
    assert response.status_code == 400
    assert response.json()["memo"] == ["A memo is at most 200 characters; this one has 201."]
    november.refresh_from_db()
    assert november.memo == ""


def test_a_long_memo_on_an_issued_invoice_is_refused_as_a_change(november, api, alice):
    meter_runs.issue_due_invoices(now=at(2, month=12))
    response = api(alice).patch(f"/api/v1/invoices/{november.pk}/", {"memo": "P" * 300})
    assert response.status_code == 409
    assert AuditEvent.objects.filter(action="billing.invoice.edit", outcome="denied").exists()


def test_a_member_may_not_change_an_invoice(november, api, bob):
    assert api(bob).patch(f"/api/v1/invoices/{november.pk}/", {"memo": "PO-1"}).status_code == 404


def test_an_operator_credit_lands_on_the_draft(november, api, ops):
    response = api(ops).post(f"/api/v1/invoices/{november.pk}/adjustments/", {"amount": "-2.50", "reason": "outage"})
    assert response.status_code == 201
    assert response.json()["total"] == "7.50"


def test_the_detail_holds_the_lines_and_total(november, api, alice):
    body = api(alice).get(f"/api/v1/invoices/{november.pk}/").json()
    assert body["total"] == "10.00"
    assert [(line["description"], line["amount"]) for line in body["lines"]] == [("job · H100-80GB · On-demand", "10.00")]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="planner settings exist on PostgreSQL only")
def test_the_lines_planner_settings_are_put_back(acme):
    with transaction.atomic():
        invoicing.usage_lines(NOV.date(), [acme.pk])
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('enable_sort'), current_setting('enable_nestloop'), "
                           "current_setting('work_mem') <> '64MB'")
            assert cursor.fetchone() == ("on", "on", True)
