"""Where the demo's downtime credit goes: on this month's draft once the month has billed
at least its amount; before that (early on the 1st) on last month's draft, which is then
issued with it, if that month billed as much."""

from datetime import timedelta
from decimal import Decimal

import pytest
from billing_support import DEC, NOV, at

from billing import demo, figures
from billing.models import Invoice


@pytest.fixture
def running_since_november(play, bob, acme, meter):
    """An H100 at 2.00 an hour, launched on 30 November at 00:00 and still running."""
    play(bob, acme, runs=[(at(30), None, "")])

    def metered_to(now):
        meter(start=NOV, end=now, now=now)
        return now

    return metered_to


def test_early_on_the_first_the_credit_goes_on_last_months_draft(running_since_november, acme, ops):
    now = running_since_november(DEC + timedelta(minutes=20))  # December has billed 0.67
    credit = demo.downtime_credit(actor=ops, team=acme, now=now)
    assert credit.amount == Decimal("-25.00") and credit.invoice.month == NOV.date()
    november = Invoice.objects.get(team=acme, month=NOV.date())
    assert november.total == Decimal("48.00") - Decimal("25.00")  # 24 h of November, less the credit
    december = figures.team_month(acme.pk, now=now)
    assert december.credits == 0 and december.month_to_date_after_credits == Decimal("0.67")


def test_once_the_month_has_billed_as_much_it_goes_on_this_months_draft(running_since_november, acme, ops):
    now = running_since_november(DEC + timedelta(hours=13))  # December has billed 26.00
    credit = demo.downtime_credit(actor=ops, team=acme, now=now)
    assert credit.invoice.month == DEC.date()
    december = figures.team_month(acme.pk, now=now)
    assert (december.month_to_date, december.credits) == (Decimal("26.00"), Decimal("-25.00"))
    assert december.month_to_date_after_credits == Decimal("1.00")
    assert Invoice.objects.get(team=acme, month=NOV.date()).total == Decimal("48.00")


def test_a_last_month_that_billed_less_keeps_none_of_it(play, bob, acme, meter, ops):
    play(bob, acme, runs=[(at(30, 18), None, "")])  # 6 h of November: 12.00
    now = DEC + timedelta(minutes=20)
    meter(start=NOV, end=now, now=now)
    assert demo.downtime_credit(actor=ops, team=acme, now=now).invoice.month == DEC.date()
    assert Invoice.objects.get(team=acme, month=NOV.date()).total == Decimal("12.00")


def test_it_is_made_once(running_since_november, acme, ops):
    now = running_since_november(DEC + timedelta(hours=13))
    first = demo.downtime_credit(actor=ops, team=acme, now=now)
    assert demo.downtime_credit(actor=ops, team=acme, now=now + timedelta(hours=1)) == first
