"""The cost explorer's cost per effective PFLOP-hour: an instance's cost over the
PFLOP-hours its tensor telemetry estimates (at its precision); no telemetry, no row."""

from decimal import Decimal

import pytest
from billing_support import DEC, NOV, at
from django.test import Client

from billing import costs
from billing.models import Charge
from monitoring.models import Rollup1h


@pytest.fixture
def two_jobs(play, meter, bob, acme):
    busy = play(bob, acme, "busy", runs=[(at(3, 0), at(3, 10), "terminate")])  # 10 h of H100: 20.00
    dark = play(bob, acme, "dark", runs=[(at(4, 0), at(4, 5), "terminate")])  # no telemetry: 10.00
    meter()
    gpu = busy.holds.get().gpu
    Rollup1h.objects.bulk_create(
        Rollup1h(gpu=gpu, instance=busy, team=acme, bucket=at(3, h), samples=3600, observed_s=3600.0,
                 tensor_active_pct_avg=50.0, sm_clock_mhz_avg=1980.0)
        for h in range(10)
    )
    return busy, dark


def test_it_divides_cost_by_the_estimated_pflop_hours(two_jobs):
    rows = costs.cost_per_pflop_hour(Charge.objects.all(), NOV, DEC)
    pflop_h = 10 * 0.5 * 989.4 * 0.98 / 1000  # 10 h at 484.8 TFLOP/s
    assert [(r.name, r.cost, r.pflop_hours) for r in rows] == [("busy", Decimal("20.00"), round(pflop_h, 3))]
    assert rows[0].per_pflop_hour == (Decimal("20.00") / Decimal(str(round(pflop_h, 3)))).quantize(Decimal("0.01"))


def test_each_hour_is_estimated_at_the_precision_of_its_time(two_jobs, bob):
    from instances import lifecycle as instance_lifecycle

    busy, _ = two_jobs
    instance_lifecycle.set_precision(actor=bob, instance=busy, precision="tf32", at=at(3, 5))
    assert costs.cost_per_pflop_hour(Charge.objects.all(), NOV, DEC)[0].pflop_hours == round(
        5 * 0.5 * 989.4 * 0.98 / 1000 + 5 * 0.5 * 494.7 * 0.98 / 1000, 3)
    instance_lifecycle.set_precision(actor=bob, instance=busy, precision="fp8")  # today: the past stays
    assert costs.cost_per_pflop_hour(Charge.objects.all(), NOV, DEC)[0].pflop_hours == round(
        5 * 0.5 * 989.4 * 0.98 / 1000 + 5 * 0.5 * 494.7 * 0.98 / 1000, 3)


def test_the_cost_explorer_shows_it_as_an_estimate(two_jobs, alice):
    client = Client()
    client.force_login(alice)
    html = client.get("/costs/", {"month": "2026-11"}).content.decode()
    assert 'id="flops-costs"' in html and "(estimate)" in html and ">busy<" in html and ">dark<" not in html.split(
        'id="flops-costs"')[1].split("</table>")[0]


