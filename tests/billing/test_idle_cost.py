import sys
from decimal import Decimal

import pytest
from billing_support import DEC, NOV, at

from billing import costs
from billing.models import Charge


@pytest.fixture
def two_jobs(play, meter, bob, acme):
    a = play(bob, acme, "busy", runs=[(at(3, 0), at(3, 10), "terminate")])  # 20.00
    b = play(bob, acme, "dark", runs=[(at(4, 0), at(4, 5), "terminate")])  # 10.00
    meter()
    return a, b


def _telemetry(monkeypatch, answer):
    import monitoring.activity as activity

    monkeypatch.setattr(activity, "activity_by_instance", lambda ids, start, end, threshold_pct=10.0: {
        i: answer.get(i, (0, 0)) for i in ids})


def test_idle_cost_is_cost_times_the_idle_share(two_jobs, monkeypatch):
    busy, dark = two_jobs
    _telemetry(monkeypatch, {busy.pk: (36000, 9000), dark.pk: (18000, 18000)})
    summary = costs.idle_cost(Charge.objects.all(), NOV, DEC)
    assert {r.name: r.idle_cost for r in summary.rows} == {"busy": Decimal("5.00"), "dark": Decimal("10.00")}
    assert (summary.idle_cost, summary.efficiency_pct) == (Decimal("15.00"), Decimal("50.0"))


def test_without_telemetry_idle_cost_is_unknown_not_zero(two_jobs, monkeypatch):
    busy, _ = two_jobs
    _telemetry(monkeypatch, {busy.pk: (36000, 0)})
    summary = costs.idle_cost(Charge.objects.all(), NOV, DEC)
    assert {r.name: r.idle_cost for r in summary.rows} == {"busy": Decimal("0.00"), "dark": None}
    assert summary.unknown_cost == Decimal("10.00")


def test_without_the_telemetry_app_everything_is_unknown(two_jobs, monkeypatch):
    monkeypatch.setitem(sys.modules, "monitoring.activity", None)
    summary = costs.idle_cost(Charge.objects.all(), NOV, DEC)
    assert summary.efficiency_pct is None and summary.unknown_cost == Decimal("30.00")
