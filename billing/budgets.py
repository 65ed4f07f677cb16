"""Budgets: a team's monthly amount with thresholds on actual and forecast spend, carried
over each month, and the alerts they raise."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from agent.protocol import LiveBudget
from alerting import feed
from audit.recording import record_event
from console.live import publish_on_commit, team_group
from console.models import Membership, Role, Team

from . import costs, figures, pricing
from .models import (
    Basis,
    Budget,
    BudgetAlert,
    Charge,
    currency,
)


def _check_thresholds(values, field: str) -> list[int]:
    if not isinstance(values, list | tuple):
        raise ValidationError({field: "A list of percentages, e.g. [50, 80, 100]."})
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1000:
            raise ValidationError({field: f"{v!r} is not a whole percentage between 1 and 1000."})
        out.append(v)
    return sorted(set(out))


POSITIVE = "A budget is a positive amount in whole cents."
MONTHS_AHEAD = 12  # the furthest month a budget may be set for, counted from this one


def _check_budget(amount, currency_code: str | None, now: datetime, month: date | None = None) -> Decimal:
    amount = pricing.money(amount)
    if not amount.is_finite() or amount <= 0 or amount != amount.quantize(pricing.CENT):
        raise ValidationError({"amount": POSITIVE})
    if currency_code is not None and currency_code != currency():
        raise ValidationError({"currency": f"Budgets are in {currency()}, this deployment's currency, not {currency_code}."})
    if month is not None:
        if month.day != 1:
            raise ValidationError({"month": "Give the month as its first day (YYYY-MM-01)."})
        this_month = pricing.month_start(now).date()
        if month < this_month:
            raise ValidationError({"month": "That month is over; budget the current month or a later one."})
        if (month.year - this_month.year) * 12 + month.month - this_month.month > MONTHS_AHEAD:
            raise ValidationError({"month": f"Budget a month within the next {MONTHS_AHEAD} months; "
                                            "a recurring budget carries itself into the months after."})
    return amount


@transaction.atomic
def create_budget(
    *, actor, team: Team, month: date, amount, currency_code: str | None = None,
    actual_thresholds=(50, 80, 100), forecast_thresholds=(100,), recurring: bool = False, now: datetime | None = None,
) -> Budget:
    now = _now(now)
    amount = _check_budget(amount, currency_code, now, month)
    actual = _check_thresholds(list(actual_thresholds), "actual_thresholds")
    forecast = _check_thresholds(list(forecast_thresholds), "forecast_thresholds")
    taken = ValidationError({"month": f"{team.name} already has a budget for {month:%B %Y}; change that one."})
    if Budget.objects.filter(team=team, month=month).exists():
        raise taken
    try:
        with transaction.atomic():  # one made meanwhile by another request: the same answer
            budget = Budget.objects.create(
                team=team, month=month, amount=amount, currency=currency(), actual_thresholds=actual,
                forecast_thresholds=forecast, recurring=bool(recurring), created_by=_user(actor), created_at=now,
            )
    except IntegrityError:
        raise taken from None
    record_event(actor=actor, action="billing.budget.create", target=budget, team=team,
                 details={"month": f"{month:%Y-%m}", "amount": str(amount), "actual": actual, "forecast": forecast,
                          "recurring": bool(recurring)})
    return budget


def save_budget(*, actor, team: Team, month: date, amount, actual_thresholds, forecast_thresholds,
                recurring: bool = False, now: datetime | None = None) -> Budget:
    """The budgets page's one form: create the month's budget, or change it if there is one."""
    existing = Budget.objects.filter(team=team, month=month).first()
    if existing is None:
        return create_budget(actor=actor, team=team, month=month, amount=amount, actual_thresholds=actual_thresholds,
                             forecast_thresholds=forecast_thresholds, recurring=recurring, now=now)
    return update_budget(actor=actor, budget=existing, amount=amount, actual_thresholds=actual_thresholds,
                         forecast_thresholds=forecast_thresholds, recurring=recurring, now=now)


@transaction.atomic
def carry_recurring_budgets(*, now: datetime | None = None) -> list[Budget]:
    """Each team whose latest budget is recurring and has none for this month gets a copy
    for this month (same amount and thresholds, still recurring), audited."""
    now = _now(now)
    month = pricing.month_start(now).date()
    made = []
    latest = {}
    for b in Budget.objects.filter(month__lt=month).order_by("team_id", "month"):
        latest[b.team_id] = b
    have = set(Budget.objects.filter(month=month).values_list("team_id", flat=True))
    for team_id, b in sorted(latest.items()):
        if not b.recurring or team_id in have:
            continue
        budget = Budget.objects.create(
            team_id=team_id, month=month, amount=b.amount, currency=b.currency, actual_thresholds=b.actual_thresholds,
            forecast_thresholds=b.forecast_thresholds, recurring=True, created_at=now,
        )
        record_event(actor="system", action="billing.budget.create", target=budget, team=team_id,
                     details={"month": f"{month:%Y-%m}", "amount": str(b.amount), "carried_from": f"{b.month:%Y-%m}",
                              "recurring": True})
        made.append(budget)
    return made


@transaction.atomic
def update_budget(*, actor, budget: Budget, amount=None, currency_code: str | None = None,
                  actual_thresholds=None, forecast_thresholds=None, recurring: bool | None = None,
                  now: datetime | None = None) -> Budget:
    now = _now(now)
    changes = {}
    if amount is not None or currency_code is not None:
        new_amount = _check_budget(amount if amount is not None else budget.amount, currency_code, now)
        if new_amount != budget.amount:
            changes["amount"] = new_amount
    if actual_thresholds is not None:
        changes["actual_thresholds"] = _check_thresholds(actual_thresholds, "actual_thresholds")
    if forecast_thresholds is not None:
        changes["forecast_thresholds"] = _check_thresholds(forecast_thresholds, "forecast_thresholds")
    if recurring is not None and bool(recurring) != budget.recurring:
        changes["recurring"] = bool(recurring)
    before = {k: str(getattr(budget, k)) for k in changes}
    for k, v in changes.items():
        setattr(budget, k, v)
    if changes:
        budget.save(update_fields=list(changes))
    record_event(actor=actor, action="billing.budget.update", target=budget, team=budget.team_id,
                 details={"before": before, "after": {k: str(v) for k, v in changes.items()}})
    return budget


@transaction.atomic
def delete_budget(*, actor, budget: Budget) -> None:
    record_event(actor=actor, action="billing.budget.delete", target=budget, team=budget.team_id,
                 details={"month": f"{budget.month:%Y-%m}", "amount": str(budget.amount)})
    budget.delete()


def check_budgets(*, now: datetime | None = None, notify: bool = True) -> list[BudgetAlert]:
    """Raise an alert for each threshold of this month's budgets that actual or forecast
    spend has crossed, once: shown in the console, pushed live and mailed to admins."""
    now = _now(now)
    month = pricing.month_start(now).date()
    carry_recurring_budgets(now=now)
    raised = []
    for budget in Budget.objects.filter(month=month).select_related("team"):
        with transaction.atomic():
            raised += _check_budget_thresholds(budget, now, notify)
    _end_budget_alerts(month, now)
    return raised


def budget_alert_key(alert: BudgetAlert) -> str:
    return f"budget:{alert.budget_id}:{alert.basis}:{alert.percent}"


def _end_budget_alerts(month: date, now: datetime) -> None:
    """Budget alerts of past months, deleted budgets or dropped thresholds resolve on
    the Alerts page; this month's crossed thresholds stay until acknowledged or resolved."""
    current = BudgetAlert.objects.filter(budget__month=month).select_related("budget")
    keep = {budget_alert_key(a) for a in current
            if a.percent in (a.budget.actual_thresholds if a.basis == Basis.ACTUAL else a.budget.forecast_thresholds)}
    feed.resolve_others(feed.AlertKind.BUDGET, keep, now=now, why="the budget month or threshold ended")


def _check_budget_thresholds(budget: Budget, now: datetime, notify: bool) -> list[BudgetAlert]:
    month = figures.team_month(budget.team_id, now=now)
    spend = {Basis.ACTUAL: month.month_to_date, Basis.FORECAST: month.forecast.point}
    done = set(BudgetAlert.objects.filter(budget=budget).values_list("basis", "percent"))
    raised = []
    for basis, thresholds in ((Basis.ACTUAL, budget.actual_thresholds), (Basis.FORECAST, budget.forecast_thresholds)):
        if basis not in spend:
            continue
        for percent in thresholds:
            if (basis, percent) in done or spend[basis] * 100 < budget.amount * percent:
                continue
            alert = BudgetAlert.objects.create(budget=budget, team=budget.team, basis=basis, percent=percent,
                                               spend=spend[basis], crossed_at=now)
            raised.append(alert)
            _announce_alert(alert, budget, notify)
    return raised


def _open_budget_alert(alert: BudgetAlert, budget: Budget, text: str) -> None:
    """The crossing on the one Alerts page, routed to the team's notification channels."""
    severity = feed.Severity.CRITICAL if alert.percent >= 100 else feed.Severity.WARNING
    feed.raise_alert(feed.AlertKind.BUDGET, feed.Condition(
        key=budget_alert_key(alert), message=text, value=float(alert.spend), threshold=float(alert.percent),
        team_id=budget.team_id, severity=severity, category=feed.Category.BUDGET,
    ), now=alert.crossed_at)


def _announce_alert(alert: BudgetAlert, budget: Budget, notify: bool) -> None:
    what = "Forecast month-end spend" if alert.basis == Basis.FORECAST else "Spend this month"
    text = (f"{what} for {budget.team.name} is {alert.spend} {budget.currency}, {alert.percent}% or more of the "
            f"{budget.month:%B %Y} budget of {budget.amount} {budget.currency}.")
    record_event(actor="system", action="billing.budget.alert", target=alert, team=budget.team_id,
                 details={"basis": alert.basis, "percent": alert.percent, "spend": str(alert.spend),
                          "budget": str(budget.amount)})
    _open_budget_alert(alert, budget, text)
    publish_on_commit([team_group(budget.team_id)], "budget", LiveBudget(
        team=budget.team_id, basis=alert.basis, percent=alert.percent, spend=str(alert.spend),
        amount=str(budget.amount), currency=budget.currency, message=text,
    ))
    if notify:
        emails = list(Membership.objects.filter(team_id=budget.team_id, role=Role.ADMIN)
                      .exclude(user__email="").values_list("user__email", flat=True))
        if emails:
            subject = f"[GPU Console] {budget.team.name}: {alert.percent}% of the {budget.month:%B} budget ({alert.basis})"
            transaction.on_commit(lambda: send_mail(subject, text, None, emails, fail_silently=True))


def month_to_date(team: Team, now: datetime | None = None) -> Decimal:
    """What ``team`` has spent so far this month (UTC), as metered, before credits
    (``billing.figures``)."""
    return costs.month_to_date(Charge.objects.filter(team=team), _now(now))


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


def _user(actor):
    return actor if getattr(actor, "is_authenticated", False) else None
