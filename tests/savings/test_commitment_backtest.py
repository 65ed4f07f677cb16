"""Commitment advice from Acme's on-demand history, and the backtest that replays the
window through the real metering with and without it, leaving nothing behind."""

import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from billing import meter_runs as billing_meter_runs
from billing import pricing
from billing.models import Charge, Reservation
from instances import lifecycle as instance_lifecycle
from savings import commitments


@pytest.fixture
def steady(alice, acme, ops, launch, catalog):
    """Two H100s on demand, running without a break for the last five days, metered."""
    now = timezone.now()
    start = now - timedelta(days=5)
    instance = launch(alice, acme, name="serve", count=2, at=start - timedelta(seconds=30))
    instance_lifecycle.mark_running(instance=instance, at=start)
    billing_meter_runs.meter_window(actor=ops, start=pricing.floor_day(start), end=now, now=now)
    return instance


def test_the_advice_reserves_what_ran_all_the_time(acme, steady):
    [advice] = commitments.advise(acme, now=timezone.now(), days=3)
    assert (advice.gpu_model, advice.gpus, advice.reserved_hourly) == ("H100-80GB", 2, Decimal("1.800000"))
    assert advice.coverage_pct == pytest.approx(100) and advice.utilisation_pct == pytest.approx(100, abs=0.1)
    assert advice.break_even_pct == 60


def test_the_backtest_prints_both_totals_and_changes_nothing(acme, steady):
    before = list(Charge.objects.order_by("id").values_list("id", "billed_cents"))
    out = io.StringIO()
    call_command("backtest_commitment", team="acme", days=3, stdout=out)
    text = out.getvalue()
    assert "without the reservation         432.00" in text  # 3 days × 24 h × 2 × 3.00
    assert "with the reservation            259.20" in text  # 3 days × 24 h × 2 × 1.80
    assert "difference                      172.80" in text
    assert not Reservation.objects.exists()
    steady.refresh_from_db()
    assert steady.pricing_model == "on_demand"
    assert list(Charge.objects.order_by("id").values_list("id", "billed_cents")) == before


def test_bad_arguments_are_named(acme):
    with pytest.raises(CommandError, match="--days"):
        call_command("backtest_commitment", team="acme", days=0, stdout=io.StringIO())
    with pytest.raises(CommandError, match="No team"):
        call_command("backtest_commitment", team="initech", stdout=io.StringIO())
