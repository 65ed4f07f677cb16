"""The demo's seeded history carries the times its actions are said to have happened."""

from datetime import timedelta

from django.utils import timezone

from audit import context, services
from audit.verification import verify
from console import demo as console_demo
from instances import demo as instances_demo


def test_recorded_at_stamps_the_events_inside(db):
    moment = timezone.now() - timedelta(days=20)
    with context.recorded_at(moment):
        event = services.record_event(actor="system", action="test.past")
    assert event.time == moment
    assert services.record_event(actor="system", action="test.now").time > moment
    assert verify().valid


def test_bobs_seeded_launches_are_found_in_their_own_days(db):
    users = console_demo.seed()
    instances_demo.seed_fleet(actor=users["ops"])
    instances_demo.seed_instances(users=users)
    launches = services.AuditEvent.objects.filter(action="instance.launch", actor_name="bob")
    old = launches.filter(time__lt=timezone.now() - timedelta(days=7))
    assert old.count() >= 2  # acme-train-70b (200 h ago), acme-old-exp (300 h ago)
    assert {e.target_name for e in old} >= {"acme-train-70b", "acme-old-exp"}
