"""The demo's seeded history carries the times its actions are said to have happened."""

from datetime import timedelta

from django.utils import timezone

from audit import recording
from audit.models import AuditEvent
from audit.verification import verify
from billing import demo as billing_demo
from billing import pricing
from console import request_context as context
from gpuconsole import demo as console_demo
from instances import demo as instances_demo


def test_recorded_at_stamps_the_events_inside(db):
    moment = timezone.now() - timedelta(days=20)
    with context.recorded_at(moment):
        event = recording.record_event(actor="system", action="test.past")
    assert event.time == moment
    assert recording.record_event(actor="system", action="test.now").time > moment
    assert verify().valid


def test_a_search_of_last_month_finds_bobs_seeded_launches(db):
    users = console_demo.seed()
    instances_demo.seed_fleet(actor=users["ops"])
    billing_demo.seed_catalog(users=users)
    instances_demo.seed_instances(users=users)
    billing_demo.seed(users=users)
    this_month = pricing.month_start(timezone.now())
    last_month = pricing.month_start(this_month - timedelta(days=1))
    launches = AuditEvent.objects.filter(
        action="instance.launch", actor_name="bob", time__gte=last_month, time__lt=this_month
    )
    assert launches.count() >= 2
    assert all(name.startswith("acme-") for name in launches.values_list("target_name", flat=True))
    assert verify().valid
