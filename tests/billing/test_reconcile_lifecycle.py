"""reconcile_costs names usage billed after an instance ended, and a job whose cost is
not what its instances were charged."""

import io

import pytest
from billing_support import at
from django.core.management import call_command
from django.core.management.base import CommandError

from billing.models import Charge, UsageRecord
from instances.models import Instance


@pytest.fixture
def ended(play, bob, acme, meter):
    instance = play(bob, acme, name="acme-ended", runs=[(at(3, 9), at(3, 17), "terminate")])
    meter()
    return instance


def reconcile() -> str:
    out = io.StringIO()
    call_command("reconcile_costs", stdout=out)
    return out.getvalue()


def test_an_instance_billed_only_while_it_ran_reconciles(ended):
    assert "nothing is billed after an instance's end" in reconcile()


def test_usage_after_the_end_is_named(ended):
    row = UsageRecord.objects.get(instance=ended)
    row.pk, row.start, row.end = None, at(3, 17), at(3, 18)
    row.save()
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 bills after an instance's end"):
        call_command("reconcile_costs", stdout=out)
    assert "instance acme-ended: usage billed to 2026-11-03 18:00:00 UTC, after it became terminated" in out.getvalue()


def test_a_charge_for_a_day_after_the_end_is_named(ended):
    row = Charge.objects.get(instance=ended)
    row.pk, row.period_start, row.period_end = None, at(5), at(6)
    row.save()
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("reconcile_costs", stdout=out)
    assert "instance acme-ended: a charge for 2026-11-05, after it became terminated" in out.getvalue()


def test_a_job_instance_outside_its_runs_is_named(ended, submit_job_with_run):
    job = submit_job_with_run
    Instance.objects.filter(pk=ended.pk).update(labels={"job": job.code})
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 jobs whose cost is not their instances' charges"):
        call_command("reconcile_costs", stdout=out)
    assert f"job {job.code} (sweep): its runs' instances 0.00, the cost explorer 0.00, the instances launched for it " \
           f"16.00" in out.getvalue()


@pytest.fixture
def submit_job_with_run(bob, acme, fleet):
    from jobs import submission

    return submission.submit_job(actor=bob, team=acme, name="sweep", command="python sweep.py", gpu_model=fleet["h100"],
                               gpu_count=1, priority="normal", now=at(1))


@pytest.mark.parametrize("month", ["9999-12", "0001-01", "1999-12", "２０２４-01", "2026-13", "2026"])
def test_a_month_outside_the_consoles_years_is_named(db, month):
    with pytest.raises(CommandError, match="Give the month as YYYY-MM, between 2000 and 2199"):
        call_command("reconcile_costs", "--month", month, stdout=io.StringIO())
