"""Metering over random lifecycles and price changes: idempotent, splittable, and
invoices that add up exactly."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import meter_runs, price_changes, pricing, reservations
from billing.models import Charge, ChargeType, Invoice, PricingCategory, Reservation, UsageRecord
from instances import lifecycle as instance_lifecycle
from instances import preemption as instance_preemption
from instances.models import GpuModel

START = datetime(2026, 10, 25, tzinfo=UTC)
NOW = datetime(2026, 12, 5, tzinfo=UTC)
FAST = settings(max_examples=20, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

lengths = st.one_of(st.sampled_from([1, 20, 59, 60, 61, 1800, 3599, 3600, 3601, 86400]), st.integers(1, 4 * 86400))
runs = st.lists(st.tuples(st.integers(120, 6 * 86400), lengths), min_size=1, max_size=3)
instances = st.lists(
    st.tuples(st.sampled_from(["on_demand", "reserved", "spot"]), st.integers(1, 4), runs,
              st.sampled_from(["stop", "terminate", "preempt", "running"])),
    min_size=1, max_size=4,
)
worlds = st.fixed_dictionaries({
    "instances": instances,
    "price_change": st.one_of(st.none(), st.tuples(st.integers(0, 38 * 86400), st.integers(100, 400))),
    "spot_changes": st.lists(st.tuples(st.integers(0, 38 * 86400), st.integers(20, 150)), max_size=4),
    "reservation": st.one_of(st.none(), st.tuples(st.integers(0, 30 * 86400), st.integers(1, 6))),
    "split": st.integers(1, 40 * 86400),
})


def _snapshot():
    return sorted(Charge.objects.values_list(
        "team_id", "instance_id", "reservation_id", "period_start", "charge_type", "pricing_category",
        "consumed_seconds", "priced_seconds", "unit_price", "list_unit_price", "list_cents", "billed_cents", "note",
    ), key=str), sorted(UsageRecord.objects.values_list("instance_id", "start", "end", "gpus"), key=str)


def _build(world, bob, acme, ops, launch):
    h100 = GpuModel.objects.get(name="H100-80GB")
    if world["price_change"]:
        t, cents = world["price_change"]
        when = START + timedelta(seconds=t)
        price_changes.set_price(actor=ops, sku="H100-80GB", kind="on_demand", hourly=Decimal(cents) / 100,
                           effective_from=when, now=when)
    for t, cents in world["spot_changes"]:
        price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly=Decimal(cents) / 100,
                                now=START + timedelta(seconds=t, microseconds=0))
    if world["reservation"]:
        t, n = world["reservation"]
        when = START + timedelta(seconds=t)
        reservations.purchase_reservation(actor=ops, team=acme, gpu_model=h100, gpu_count=n, term="1y", start=when, now=when)
    expected_runs = []
    for k, (pricing_model, count, spans, ending) in enumerate(world["instances"]):
        clock = START
        made = None
        for i, (gap, length) in enumerate(spans):
            start = clock + timedelta(seconds=gap)
            end = start + timedelta(seconds=length)
            if end >= NOW - timedelta(minutes=5):
                break
            last = i == len(spans) - 1
            how = ending if last else "stop"
            if how == "preempt" and pricing_model != "spot":
                how = "terminate"
            if made is None:
                made = launch(bob, acme, name=f"i{k}", count=count, pricing=pricing_model,
                              at=start - timedelta(seconds=30))
            else:
                instance_lifecycle.start_instance(actor=bob, instance=made, at=start - timedelta(seconds=30),
                                                 provision=False)
            instance_lifecycle.mark_running(instance=made, at=start)
            if how == "running":
                expected_runs.append((made.pk, pricing_model, count, start, None, False))
                break
            if how == "stop":
                instance_lifecycle.stop_instance(actor=bob, instance=made, at=end, finish=False)
                instance_lifecycle.finish_stop(instance=made, at=end)
            elif how == "preempt":
                instance_preemption.preempt_instance(instance=made, at=end)
            else:
                instance_lifecycle.terminate_instance(actor=bob, instance=made, at=end)
            expected_runs.append((made.pk, pricing_model, count, start, end, how == "preempt"))
            clock = end
            if how in ("terminate", "preempt"):
                break
    return expected_runs


@FAST
@given(world=worlds)
def test_metering_is_idempotent_splittable_and_adds_up(world, prices, bob, acme, ops, launch):
    with transaction.atomic():
        expected_runs = _build(world, bob, acme, ops, launch)
        meter_runs.meter_window(actor=ops, start=START, end=NOW, now=NOW)
        once = _snapshot()
        meter_runs.meter_window(actor=ops, start=START, end=NOW, now=NOW)
        assert _snapshot() == once
        middle = START + timedelta(seconds=world["split"])
        meter_runs.meter_window(actor=ops, start=START, end=middle, now=NOW)
        meter_runs.meter_window(actor=ops, start=middle, end=NOW, now=NOW)
        assert _snapshot() == once
        _assert_invoices_add_up(acme)
        _assert_quantities(expected_runs)
        _assert_commitments_fully_billed()
        transaction.set_rollback(True)


def _assert_invoices_add_up(acme):
    for invoice in Invoice.objects.filter(team=acme):
        amounts = [line.amount for line in invoice.lines.all()]
        assert all(isinstance(a, Decimal) for a in amounts)
        assert sum(amounts, Decimal("0.00")) == invoice.total
        charged = Charge.objects.filter(team=acme, month=invoice.month).values_list("billed_cents", flat=True)
        assert all(isinstance(c, int) for c in charged)
        assert pricing.from_cents(sum(charged)) == invoice.subtotal


def _assert_quantities(expected_runs):
    """On-demand pays max(length, 60 s) per run; a spot run preempted within its first
    hour pays nothing; everything else pays what it used."""
    for pk, pricing_model, count, start, end, preempted in expected_runs:
        used = pricing.seconds(start, end or NOW) * count
        billed = sum(Charge.objects.filter(instance_id=pk).values_list("priced_seconds", flat=True))
        if pricing_model == "on_demand":
            minimum = sum(max(pricing.seconds(s, e or NOW), 60 if e else 0) * c
                          for p, m, c, s, e, _ in expected_runs if p == pk)
            assert billed == minimum
        elif pricing_model == "spot" and preempted and pricing.seconds(start, end) < 3600:
            free = Charge.objects.filter(instance_id=pk, period_start__gte=pricing.floor_day(start),
                                         period_start__lt=end).exclude(priced_seconds=0)
            assert used > 0 and any(c.billed_cents == 0 for c in free)


def _assert_commitments_fully_billed():
    for r in Reservation.objects.all():
        for day, s, e in pricing.day_segments(max(r.start, START), min(r.end, NOW)):
            rows = Charge.objects.filter(reservation=r, period_start=day)
            committed = sum(rows.filter(pricing_category=PricingCategory.COMMITTED).values_list("priced_seconds", flat=True))
            assert committed == r.gpu_count * pricing.seconds(s, e)
            assert all(c.charge_type in ChargeType.values for c in rows)
