from decimal import Decimal

from billing_support import at
from django.utils import timezone

from billing import invoices, meter_runs, reservations
from billing.models import MeterState
from instances import lifecycle as instance_lifecycle


def test_a_running_instance_shows_its_price_and_what_it_cost_this_month(play, bob, acme, api, ops):
    now = timezone.now()
    job = play(bob, acme, runs=[(now - timezone.timedelta(hours=3), None, "")], count=2)
    meter_runs.meter_window(actor=ops, start=now - timezone.timedelta(days=1), end=now, now=now)
    MeterState.objects.update_or_create(id=1, defaults={"metered_until": now})
    row = api(bob).get(f"/api/v1/instances/{job.pk}/").json()
    assert Decimal(row["price_per_hour"]) == Decimal("4.00")  # 2 × H100 at 2.00
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    hours = min(now - job.state_changed_at, now - month_start).total_seconds() / 3600
    assert abs(Decimal(row["cost_month_to_date"]) - Decimal(4 * hours).quantize(Decimal("0.01"))) <= Decimal("0.02")
    assert row["cost_as_of"] is not None and row["stuck"] is False


def test_spot_instances_show_the_spot_price_and_stopped_ones_no_price(play, bob, acme, api):
    spot = play(bob, acme, name="s", runs=[(at(3, 10), None, "")], pricing="spot", count=2)
    stopped = play(bob, acme, name="t", runs=[(at(3, 10), at(3, 11), "stop")])
    rows = {r["name"]: r for r in api(bob).get("/api/v1/instances/").json()["results"]}
    assert Decimal(rows["s"]["price_per_hour"]) == Decimal("1.44")
    assert rows["t"]["price_per_hour"] is None
    assert spot.pk and stopped.pk


def test_reserved_gpus_are_priced_at_the_reservation_and_the_rest_on_demand(play, bob, alice, acme, api):
    reservations.purchase_reservation(actor=alice, team=acme, gpu_model=_h100(),
                                  gpu_count=2, term="1y", start=at(1), now=at(1))
    job = play(bob, acme, runs=[(at(3, 10), None, "")], pricing="reserved", count=4)
    row = api(bob).get(f"/api/v1/instances/{job.pk}/").json()
    assert Decimal(row["price_per_hour"]) == Decimal("2") * Decimal("1.20") + Decimal("2") * Decimal("2.00")


def test_the_summary_gives_the_run_rate_and_both_month_to_date_figures(play, bob, alice, acme, api, ops):
    now = timezone.now()
    play(bob, acme, runs=[(now - timezone.timedelta(hours=2), None, "")])
    invoices.add_adjustment(actor=ops, team=acme, amount=Decimal("-1.00"), reason="goodwill", now=now)
    meter_runs.meter_window(actor=ops, start=now - timezone.timedelta(days=1), end=now, now=now)
    body = api(bob).get(f"/api/v1/costs/summary/?team={acme.pk}").json()
    assert body["run_rate_per_hour"] == "2.00"
    assert Decimal(body["month_to_date_after_credits"]) == Decimal(body["month_to_date"]) - 1
    assert Decimal(body["forecast"]["point"]) >= Decimal(body["forecast"]["at_run_rate"])


def test_a_stuck_stop_has_no_price_and_is_flagged(play, bob, acme, api):
    job = play(bob, acme, runs=[(at(3, 10), None, "")])
    instance_lifecycle.stop_instance(actor=bob, instance=job, at=at(3, 11), finish=False)
    row = api(bob).get(f"/api/v1/instances/{job.pk}/").json()
    assert row["stuck"] is True and row["price_per_hour"] is None


def _h100():
    from instances.models import GpuModel

    return GpuModel.objects.get(name="H100-80GB")
