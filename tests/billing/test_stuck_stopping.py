from datetime import timedelta
from decimal import Decimal

from billing_support import at

from audit.models import AuditEvent
from billing.models import Charge
from instances import lifecycle, transitions
from instances.models import State


def _stuck(play, bob, acme):
    job = play(bob, acme, runs=[(at(3, 10), None, "")])
    lifecycle.stop_instance(actor=bob, instance=job, at=at(3, 11), finish=False)
    job.refresh_from_db()
    return job


def test_billing_stops_at_the_grace_of_a_stop_that_never_finishes(play, bob, acme, meter):
    _stuck(play, bob, acme)
    meter(now=at(5))
    # one hour running, then ten minutes of stopping: 70 minutes at 2.00/h
    assert sum(c.billed_cost for c in Charge.objects.all()) == Decimal("2.33")


def test_a_stop_confirmed_within_the_grace_is_billed_to_the_confirmation(play, bob, acme, meter):
    job = _stuck(play, bob, acme)
    lifecycle.finish_stop(instance=job, at=at(3, 11, 3))
    meter(now=at(5))
    assert sum(c.priced_seconds for c in Charge.objects.all()) == 3780


def test_a_stuck_stop_is_flagged_after_the_grace(play, bob, acme):
    job = _stuck(play, bob, acme)
    assert not transitions.is_stuck(job, at(3, 11, 10))
    assert transitions.is_stuck(job, at(3, 11, 10) + timedelta(seconds=1))


def test_operators_force_a_stuck_stop_and_it_is_audited(play, bob, acme, api, ops, meter):
    job = _stuck(play, bob, acme)
    assert api(bob).post(f"/api/v1/instances/{job.pk}/force-stop/").status_code == 403
    response = api(ops).post(f"/api/v1/instances/{job.pk}/force-stop/")
    assert response.status_code == 200 and response.json()["state"] == State.STOPPED
    assert AuditEvent.objects.filter(action="instance.force_stop", actor_name="ops").exists()
    meter(now=at(5))
    assert sum(c.priced_seconds for c in Charge.objects.all()) == 4200  # still only to the grace


def test_only_a_stopping_instance_can_be_forced(play, bob, acme, api, ops):
    job = play(bob, acme, runs=[(at(3, 10), None, "")])
    assert api(ops).post(f"/api/v1/instances/{job.pk}/force-stop/").status_code == 409
