from datetime import timedelta
from decimal import Decimal

from billing_support import at
from hypothesis import given, settings
from hypothesis import strategies as st

from billing import costs, forecast
from billing.models import Charge

money = st.decimals(min_value=Decimal("0"), max_value=Decimal("100000"), places=2)


def test_no_forecast_before_a_week_of_history():
    assert forecast.month_end([Decimal("10.00")] * 6, Decimal("60.00"), 86400 * 10) is None


def test_steady_spend_forecasts_itself():
    outlook = forecast.month_end([Decimal("10.00")] * 10, Decimal("50.00"), 86400 * 20)
    assert (outlook.point, outlook.low, outlook.high) == (Decimal("250.00"), Decimal("250.00"), Decimal("250.00"))


@settings(max_examples=60, deadline=None)
@given(st.lists(money, min_size=7, max_size=20), money, st.integers(0, 31 * 86400))
def test_the_interval_holds_the_point_and_never_falls_below_what_is_spent(history, spent, remaining):
    outlook = forecast.month_end(history, spent, remaining)
    assert spent <= outlook.low <= outlook.point <= outlook.high
    assert all(isinstance(v, Decimal) for v in (outlook.point, outlook.low, outlook.high))


def test_the_team_forecast_uses_complete_days_only(play, meter, bob, acme):
    play(bob, acme, runs=[(at(20), None, "")])  # 48.00 a day
    meter(start=at(20), end=at(2, month=12), now=at(1, 12, month=12))
    outlook = costs.forecast(Charge.objects.filter(team=acme), at(1, 12, month=12))
    assert outlook.mean_daily == Decimal("48.00")
    assert outlook.point == Decimal("24.00") + Decimal("48.00") * Decimal("30.5")


def test_a_new_team_has_no_forecast(play, meter, bob, acme):
    play(bob, acme, runs=[(at(28), None, "")])
    meter(start=at(28), end=at(2, month=12), now=at(1, 12, month=12) + timedelta(hours=1))
    assert costs.forecast(Charge.objects.filter(team=acme), at(1, 13, month=12)) is None
