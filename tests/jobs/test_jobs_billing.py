"""A low-priority job is billed per second at the idle-capacity price the operator set;
its cost so far is the same figure in the API, on the queue page and in the cost
explorer by job."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing import costs, rates
from billing import meter_runs as billing_meter_runs
from billing.models import Charge, PricingCategory
from instances import lifecycle as instance_lifecycle
from instances import preemption as instance_preemption
from jobs import queue_status, scheduler

T0 = datetime(2026, 11, 10, 8, 0, tzinfo=UTC)


def _run_for(job, start, seconds, how="terminate"):
    scheduler.run_queue(now=start, provision=False)
    job.refresh_from_db()
    instance_lifecycle.mark_running(instance=job.instance, at=start)
    end = start + timedelta(seconds=seconds)
    if how == "preempt":
        instance_preemption.preempt_instance(instance=job.instance, at=end)
    else:
        instance_lifecycle.terminate_instance(actor="system", instance=job.instance, at=end)
    scheduler.run_queue(now=end, provision=False)
    job.refresh_from_db()


def test_a_job_pays_the_idle_price_per_second(submit, acme, bob, ops):
    job = submit(bob, acme, count=2, now=T0)
    _run_for(job, T0, 3600, how="preempt")  # 2 GPUs × 1 h × 0.25
    _run_for(job, T0 + timedelta(hours=2), 90)  # 2 GPUs × 90 s × 0.25 = 0.0125, no 60-s minimum top-up
    billing_meter_runs.meter_window(actor=ops, start=T0, end=T0 + timedelta(days=1), now=T0 + timedelta(days=1))
    charges = Charge.objects.filter(instance__job_run__job=job)
    assert sorted(c.billed_cost for c in charges) == [Decimal("0.01"), Decimal("0.50")]
    assert {c.pricing_category for c in charges} == {PricingCategory.DYNAMIC}
    assert sum(c.list_cost for c in charges) == Decimal("2.05")  # what on-demand (1.00) would have cost
    assert queue_status.job_costs([job.pk]) == {job.pk: Decimal("0.51")}
    by_job = costs.grouped(Charge.objects.all(), "job")
    assert [(r["key"], r["label"], r["billed_cost"]) for r in by_job] == [(str(job.pk), "train", Decimal("0.51"))]


def test_a_running_job_bills_the_idle_price_per_hour_now(submit, acme, bob):
    job = submit(bob, acme, count=4)
    scheduler.run_queue(provision=False)
    job.refresh_from_db()
    instance_lifecycle.mark_running(instance=job.instance)
    from django.utils import timezone

    assert rates.run_rate(team_ids=[acme.pk], now=timezone.now()).instances[job.instance_id] == Decimal("1.00")
    assert queue_status.queue_info([job])[job.pk].price_per_hour == Decimal("1.00")
