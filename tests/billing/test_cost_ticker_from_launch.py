"""An instance launched after the last metering has cost only its own seconds: the
instance's cost so far (page, ticker and API) is billing's figure, the charges metering
makes for the same instant, not the price times the time since the last metering."""

import re
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing import meter_runs
from billing.models import Charge, MeterState
from instances import catalog


def metered_now(ops, now):
    meter_runs.meter_window(actor=ops, start=now - timedelta(hours=1), end=now, now=now)
    MeterState.objects.update_or_create(id=1, defaults={"metered_until": now})


def test_fifteen_seconds_after_launch_it_has_cost_fifteen_seconds(play, bob, acme, ops):
    base = timezone.now().replace(microsecond=0) - timedelta(minutes=20)
    if base.day == 1 and base.hour == 0:  # keep the whole story inside one month and day
        base += timedelta(hours=1)
    metered_now(ops, base)
    launched = base + timedelta(minutes=10)
    job = play(bob, acme, runs=[(launched, None, "")], count=2)  # 2 × H100 at 2.00
    now = launched + timedelta(seconds=15)
    cost = catalog.instance_costs([job], now=now)[job.pk]
    assert cost.since == launched
    assert cost.so_far == Decimal("0.02")  # 4.00/h × 15 s, not × 10 min 15 s (0.68)
    meter_runs.meter_window(actor=ops, start=base, end=now, now=now)
    billed = sum(c.billed_cents for c in Charge.objects.filter(instance=job))
    assert cost.so_far == Decimal(billed) / 100


def test_a_running_instance_counts_from_the_last_metering(play, bob, acme, ops):
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=30)
    job = play(bob, acme, runs=[(start, None, "")])
    checked = start + timedelta(minutes=20)
    metered_now(ops, checked)
    cost = catalog.instance_costs([job], now=checked + timedelta(minutes=5))[job.pk]
    assert cost.since == checked
    assert cost.so_far == cost.month_to_date + Decimal("0.17")  # 2.00/h × 5 min


def test_the_page_and_the_api_show_billings_figure(play, bob, acme, ops, client, api):
    base = timezone.now().replace(microsecond=0) - timedelta(minutes=30)
    metered_now(ops, base)
    launched = base + timedelta(minutes=29)
    job = play(bob, acme, runs=[(launched, None, "")], count=2)
    client.force_login(bob)

    def between(read):
        before = catalog.instance_costs([job], now=timezone.now())[job.pk].so_far
        figure = read()
        after = catalog.instance_costs([job], now=timezone.now())[job.pk].so_far
        assert before <= figure <= after

    page = client.get(f"/instances/{job.pk}/").content.decode()
    ticker = re.search(r'<span id="cost-ticker"[^>]*data-since="([^"]+)"[^>]*>([^<]+)</span>', page)
    assert ticker.group(1).startswith(launched.strftime("%Y-%m-%dT%H:%M:%S"))
    between(lambda: Decimal(re.search(r'<span id="cost-ticker"[^>]*>([^<]+)</span>',
                                      client.get(f"/instances/{job.pk}/").content.decode()).group(1)))
    row = api(bob).get(f"/api/v1/instances/{job.pk}/").json()
    assert row["cost_since"].startswith(launched.strftime("%Y-%m-%dT%H:%M:%S"))
    between(lambda: Decimal(api(bob).get(f"/api/v1/instances/{job.pk}/").json()["cost_so_far"]))
