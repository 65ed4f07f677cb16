"""A budget crossing is an alert on the one Alerts page, for the team, and it ends with
the month."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from billing_support import at

from alerting.models import Alert
from billing import budgets

DECEMBER = date(2026, 12, 1)


@pytest.fixture
def spending(play, meter, bob, acme):
    play(bob, acme, runs=[(at(1, 0, month=12), None, "")], count=2)  # 4.00 an hour
    return lambda hour: meter(start=at(1, month=12), end=at(2, month=12), now=at(1, hour, month=12))


@pytest.fixture
def budget(alice, acme):
    return budgets.create_budget(actor=alice, team=acme, month=DECEMBER, amount=Decimal("100.00"),
                                  actual_thresholds=[50, 100], forecast_thresholds=[], now=at(1, month=12))


def test_a_crossing_opens_a_budget_alert_for_the_team(budget, spending, acme):
    spending(13)
    budgets.check_budgets(now=at(1, 13, month=12))
    alert = Alert.objects.get(category="budget")
    assert (alert.kind, alert.team_id, alert.state, alert.severity) == ("budget", acme.pk, "open", "warning")
    assert "50%" in alert.message


def test_the_alert_shows_on_the_alerts_page_for_the_team_only(budget, spending, client, alice, charlie):
    spending(13)
    budgets.check_budgets(now=at(1, 13, month=12))
    client.force_login(alice)
    assert "50% or more" in client.get("/alerts/?category=budget").content.decode()
    client.force_login(charlie)
    assert "50% or more" not in client.get("/alerts/").content.decode()


def test_a_budget_alert_resolves_when_its_month_is_over(budget, spending):
    spending(13)
    budgets.check_budgets(now=at(1, 13, month=12))
    budgets.check_budgets(now=datetime(2027, 1, 1, 1, tzinfo=UTC))
    assert Alert.objects.get(category="budget").state == "resolved"
