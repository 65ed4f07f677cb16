import json
from datetime import date
from decimal import Decimal

from billing import charts
from billing.costs import CoverageDay, IdleRow
from billing.forecast import Forecast

DAYS = [date(2026, 11, 1), date(2026, 11, 2)]


def _no_float(obj):
    if isinstance(obj, float):
        raise AssertionError(f"float in figure: {obj}")
    if isinstance(obj, dict):
        for v in obj.values():
            _no_float(v)
    if isinstance(obj, list):
        for v in obj:
            _no_float(v)


def _axes(fig):
    return fig["layout"]["xaxis"]["title"]["text"], fig["layout"]["yaxis"]["title"]["text"]


def test_daily_cost_is_stacked_by_pricing_category():
    series = {"standard": [Decimal("1.5"), Decimal("2")], "committed": [Decimal("3"), Decimal("0")],
              "dynamic": [Decimal("0.25"), Decimal("0")]}
    fig = charts.daily_cost(DAYS, series, "USD")
    assert fig["layout"]["barmode"] == "stack"
    assert [t["name"] for t in fig["data"]] == ["On-demand (Standard)", "Reserved (Committed)", "Spot (Dynamic)"]
    assert fig["data"][0]["y"] == ["1.50", "2.00"]
    assert _axes(fig) == ("Day (UTC)", "Cost (USD)")
    _no_float(fig["data"])
    json.dumps(fig)


def test_a_breakdown_folds_the_tail():
    rows = [(f"i{n}", Decimal(n)) for n in range(20)]
    fig = charts.breakdown(rows, "Cost by instance", "Instance", "USD", limit=5)
    assert fig["data"][0]["y"][0] == "16 others"
    assert fig["data"][0]["x"][-1] == "19.00"
    assert _axes(fig) == ("Cost (USD)", "Instance")
    # The names set the margin and the title stands beyond them, whatever their length.
    assert fig["layout"]["yaxis"]["automargin"] is True
    assert fig["layout"]["yaxis"]["title"]["standoff"] > 0
    assert "l" not in fig["layout"]["margin"] or fig["layout"]["margin"]["l"] <= 70


def test_coverage_shows_covered_beyond_and_unused_gpu_hours():
    fig = charts.coverage([CoverageDay(DAYS[0], Decimal("10"), Decimal("2"), Decimal("1"))])
    assert [(t["name"], t["y"]) for t in fig["data"]] == [
        ("Covered by reservations", ["10"]), ("Beyond reservations (on-demand)", ["1"]), ("Unused commitment", ["2"])]
    assert _axes(fig) == ("Day (UTC)", "GPU-hours")


def test_idle_keeps_unknown_apart_from_idle():
    rows = [IdleRow(1, "a", Decimal("10"), Decimal("4"), 100, 40), IdleRow(2, "b", Decimal("6"), None, 0, 0)]
    fig = charts.idle(rows, "USD")
    assert {t["name"]: t["x"] for t in fig["data"]} == {
        "Active": ["0.00", "6.00"], "Idle (< 10% real activity)": ["0.00", "4.00"], "No telemetry": ["6.00", "0.00"]}
    _no_float(fig["data"])


def test_the_forecast_chart_draws_interval_and_budget():
    outlook = Forecast(Decimal("300"), Decimal("250"), Decimal("350"), Decimal("10"), 14, Decimal("0.40"), Decimal("280"),
                       Decimal("300"), "history")
    fig = charts.forecast(DAYS, [Decimal("10"), Decimal("20")], date(2026, 11, 30), outlook, Decimal("280"), "USD")
    assert [t["name"] for t in fig["data"]] == ["Spent (cumulative)", "Forecast interval (80%)", "Forecast", "Budget"]
    assert fig["data"][2]["y"] == ["20.00", "300.00"]
    assert _axes(fig) == ("Day (UTC)", "Cost (USD)")
    _no_float(fig["data"])


def test_no_forecast_draws_only_what_was_spent():
    fig = charts.forecast(DAYS, [Decimal("1"), Decimal("2")], date(2026, 11, 30), None, None, "USD")
    assert [t["name"] for t in fig["data"]] == ["Spent (cumulative)"]
