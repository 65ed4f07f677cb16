import re
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from billing_support import at, months_ahead
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.models import AuditEvent
from billing import budgets
from billing.models import Budget, BudgetAlert
from console import live

DECEMBER = date(2026, 12, 1)


@pytest.fixture
def spending(play, meter, bob, acme):
    play(bob, acme, runs=[(at(1, 0, month=12), None, "")], count=2)  # 4.00 an hour
    return lambda hour: meter(start=at(1, month=12), end=at(2, month=12), now=at(1, hour, month=12))


@pytest.fixture
def budget(alice, acme):
    return budgets.create_budget(actor=alice, team=acme, month=DECEMBER, amount=Decimal("100.00"),
                                  actual_thresholds=[50, 100], forecast_thresholds=[], now=at(1, month=12))


@pytest.fixture
def published(monkeypatch):
    sent = []
    monkeypatch.setattr(live, "publish", lambda groups, event, data: sent.append((groups, event, data)))
    return sent


def test_crossing_a_threshold_alerts_once(budget, spending, mailoutbox, published, django_capture_on_commit_callbacks):
    spending(13)  # 52.00
    with django_capture_on_commit_callbacks(execute=True):
        assert [a.percent for a in budgets.check_budgets(now=at(1, 13, month=12))] == [50]
        assert budgets.check_budgets(now=at(1, 13, month=12)) == []
    assert [m.to for m in mailoutbox] == [["alice@example.com"]]
    assert "50%" in mailoutbox[0].subject
    assert published[-1][1:] == ("budget", published[-1][2]) and published[-1][2].percent == 50
    assert AuditEvent.objects.filter(action="billing.budget.alert").count() == 1


def test_below_every_threshold_nothing_happens(budget, spending, mailoutbox):
    spending(12)  # 48.00
    assert budgets.check_budgets(now=at(1, 12, month=12)) == []
    assert mailoutbox == []


def test_a_forecast_threshold_alerts_before_the_money_is_spent(alice, acme, play, meter, bob, mailoutbox):
    play(bob, acme, runs=[(at(20), None, "")])  # 48.00 a day since 20 November
    meter(start=at(20), end=at(2, month=12), now=at(1, 1, month=12))
    budgets.create_budget(actor=alice, team=acme, month=DECEMBER, amount=Decimal("1000.00"), actual_thresholds=[100],
                           forecast_thresholds=[100], now=at(1, month=12))
    alerts = budgets.check_budgets(now=at(1, 1, month=12), notify=False)
    assert [(a.basis, a.percent) for a in alerts] == [("forecast", 100)]
    assert alerts[0].spend > Decimal("1000")


def test_an_admin_manages_budgets_through_the_api(api, alice, acme):
    client = api(alice)
    created = client.post("/api/v1/budgets/", {"team": acme.pk, "month": months_ahead(2), "amount": "500.00"}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["actual_thresholds"] == [50, 80, 100]
    pk = created.json()["id"]
    assert client.patch(f"/api/v1/budgets/{pk}/", {"amount": "750.00"}, format="json").json()["amount"] == "750.00"
    assert client.delete(f"/api/v1/budgets/{pk}/").status_code == 204
    assert [e.action for e in AuditEvent.objects.filter(action__startswith="billing.budget")] == [
        "billing.budget.create", "billing.budget.update", "billing.budget.delete"]


def test_a_member_neither_sees_nor_sets_budgets(api, bob, acme, budget):
    assert api(bob).get("/api/v1/budgets/").json()["count"] == 0
    response = api(bob).post("/api/v1/budgets/", {"team": acme.pk, "month": months_ahead(2), "amount": "5.00"}, format="json")
    assert response.status_code == 403


def test_one_budget_per_team_and_month(api, alice, acme):
    month = {"team": acme.pk, "month": months_ahead(1), "amount": "5.00"}
    assert api(alice).post("/api/v1/budgets/", month, format="json").status_code == 201
    response = api(alice).post("/api/v1/budgets/", month, format="json")
    assert response.status_code == 400 and "Acme already has a budget for" in response.json()["month"][0]
    assert Budget.objects.count() == 1


def test_alerts_belong_to_the_team(budget, spending, api, charlie):
    spending(13)
    budgets.check_budgets(now=at(1, 13, month=12), notify=False)
    assert BudgetAlert.objects.count() == 1
    assert api(charlie).get("/api/v1/budget-alerts/").json()["count"] == 0


def test_the_budgets_page_changes_a_months_budget_instead_of_refusing(client, alice, acme):
    client.force_login(alice)
    month = timezone.now().strftime("%Y-%m")
    form = {"team": acme.pk, "month": month, "amount": "1000", "actual_thresholds": "50, 100", "forecast_thresholds": "100"}
    client.post("/budgets/", form)
    response = client.post("/budgets/", {**form, "amount": "1500", "recurring": "on"})
    assert response.status_code == 302
    budget = Budget.objects.get(team=acme)
    assert (budget.amount, budget.recurring) == (Decimal("1500.00"), True)
    assert 'value="1500' in client.get(f"/budgets/?edit={budget.pk}").content.decode()


def test_the_budgets_page_and_the_browser_hold_the_same_rule_for_an_amount(client, alice, acme):
    client.force_login(alice)
    page = client.get("/budgets/").content.decode()
    assert re.search(r'<input[^>]*name="amount"[^>]*min="0.01"', page), "the browser's check is the service's"
    month = timezone.now().strftime("%Y-%m")
    form = {"team": acme.pk, "month": month, "actual_thresholds": "50, 100", "forecast_thresholds": "100"}
    for amount in ("0", "-50", "0.001"):
        response = client.post("/budgets/", {**form, "amount": amount})
        assert response.status_code == 400, amount
        assert budgets.POSITIVE in response.content.decode(), amount
    assert not Budget.objects.filter(team=acme).exists()


def test_a_recurring_budget_is_carried_into_the_next_month(alice, acme):
    budgets.create_budget(actor=alice, team=acme, month=date(2026, 11, 1), amount=Decimal("900"), recurring=True,
                           now=datetime(2026, 11, 2, tzinfo=UTC))
    budgets.check_budgets(now=datetime(2026, 12, 1, 0, 5, tzinfo=UTC), notify=False)
    december = Budget.objects.get(team=acme, month=date(2026, 12, 1))
    assert (december.amount, december.recurring) == (Decimal("900.00"), True)
    budgets.check_budgets(now=datetime(2026, 12, 1, 0, 10, tzinfo=UTC), notify=False)
    assert Budget.objects.filter(team=acme).count() == 2


def test_recurring_is_set_and_changed_through_the_api(api, alice, acme):
    month = timezone.now().strftime("%Y-%m")
    made = api(alice).post("/api/v1/budgets/", {"team": acme.pk, "month": month, "amount": "100.00", "recurring": True},
                           format="json")
    assert made.status_code == 201 and made.json()["recurring"] is True
    changed = api(alice).patch(f"/api/v1/budgets/{made.json()['id']}/", {"recurring": False}, format="json")
    assert changed.json()["recurring"] is False


@pytest.mark.parametrize("month, message", [("9999-12", "between 2000 and 2199"), ("later", "within the next 12 months")])
def test_a_month_too_far_ahead_is_refused_by_name(api, alice, acme, month, message):
    month = months_ahead(13) if month == "later" else month
    response = api(alice).post("/api/v1/budgets/", {"team": acme.pk, "month": month, "amount": "5.00"}, format="json")
    assert response.status_code == 400 and message in response.json()["month"][0]
    assert Budget.objects.count() == 0


@pytest.mark.parametrize("now, month, accepted", [
    (datetime(2026, 12, 31, 23, 59, tzinfo=UTC), date(2027, 12, 1), True),
    (datetime(2026, 12, 31, 23, 59, tzinfo=UTC), date(2028, 1, 1), False),
    (datetime(2027, 1, 1, tzinfo=UTC), date(2028, 1, 1), True),
    (datetime(2027, 1, 1, tzinfo=UTC), date(2026, 12, 1), False),
])
def test_the_twelve_months_count_from_the_month_of_now(alice, acme, now, month, accepted):
    def create():
        return budgets.create_budget(actor=alice, team=acme, month=month, amount=Decimal("10.00"),
                                     actual_thresholds=[100], forecast_thresholds=[], now=now)

    if accepted:
        assert create().month == month
    else:
        with pytest.raises(ValidationError):
            create()


def test_twelve_months_ahead_is_accepted(api, alice, acme):
    response = api(alice).post("/api/v1/budgets/", {"team": acme.pk, "month": months_ahead(12), "amount": "5.00"},
                               format="json")
    assert response.status_code == 201, response.json()
