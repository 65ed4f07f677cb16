from decimal import Decimal

from billing_support import at
from hypothesis import given, settings
from hypothesis import strategies as st

from billing import costs, figures, forecast
from billing.models import Charge

money = st.decimals(min_value=Decimal("0"), max_value=Decimal("100000"), places=2)


def test_before_a_week_of_history_the_forecast_is_the_run_rate():
    outlook = forecast.month_end([Decimal("10.00")] * 6, Decimal("60.00"), 86400 * 10, Decimal("2.00"))
    assert (outlook.point, outlook.basis, outlook.from_history) == (Decimal("540.00"), "run_rate", None)


def test_the_forecast_never_falls_below_the_run_rate_to_month_end():
    # history says 10/day, but what runs now costs 30/h: the run rate wins
    outlook = forecast.month_end([Decimal("10.00")] * 14, Decimal("100.00"), 86400 * 10, Decimal("30.00"))
    assert outlook.point == outlook.at_run_rate == Decimal("7300.00")
    assert outlook.basis == "run_rate" and "30.00/h" in outlook.basis_text


def test_history_above_the_run_rate_adds_to_it():
    outlook = forecast.month_end([Decimal("100.00")] * 14, Decimal("100.00"), 86400 * 10, Decimal("1.00"))
    assert (outlook.point, outlook.basis) == (Decimal("1100.00"), "history")


def test_the_low_end_never_drops_below_the_commitments():
    history = [Decimal(x) for x in ("0", "20000") * 4]  # wild days: a band wider than the point
    outlook = forecast.month_end(history, Decimal("10.00"), 86400, Decimal("5.00"), Decimal("4.00"))
    assert outlook.low == Decimal("106.00")  # 10.00 spent + 4.00/h of reservations for a day


def test_steady_spend_forecasts_itself():
    outlook = forecast.month_end([Decimal("10.00")] * 10, Decimal("50.00"), 86400 * 20)
    assert (outlook.point, outlook.low, outlook.high) == (Decimal("250.00"), Decimal("250.00"), Decimal("250.00"))


@settings(max_examples=60, deadline=None)
@given(st.lists(money, min_size=7, max_size=20), money, st.integers(0, 31 * 86400))
def test_the_interval_holds_the_point_and_never_falls_below_what_is_spent(history, spent, remaining):
    outlook = forecast.month_end(history, spent, remaining, Decimal("1.50"), Decimal("0.50"))
    assert spent <= outlook.low <= outlook.point <= outlook.high
    assert outlook.point >= outlook.at_run_rate
    assert all(isinstance(v, Decimal) for v in (outlook.point, outlook.low, outlook.high))


def test_the_team_forecast_uses_complete_days_only(play, meter, bob, acme):
    play(bob, acme, runs=[(at(20), None, "")])  # 48.00 a day
    meter(start=at(20), end=at(2, month=12), now=at(1, 12, month=12))
    outlook = costs.forecast(Charge.objects.filter(team=acme), at(1, 12, month=12))
    assert outlook.mean_daily == Decimal("48.00")
    assert outlook.point == Decimal("24.00") + Decimal("48.00") * Decimal("30.5")


def test_a_new_team_is_forecast_from_what_it_runs(play, meter, bob, acme):
    play(bob, acme, runs=[(at(28), None, "")])
    meter(start=at(28), end=at(2, month=12), now=at(1, 13, month=12))
    month = figures.team_month(acme.pk, now=at(1, 13, month=12))
    assert month.run_rate_per_hour == Decimal("2.00")
    assert month.forecast.point == Decimal("26.00") + Decimal("2.00") * (30 * 24 + 11)
    assert month.forecast.basis == "run_rate"
