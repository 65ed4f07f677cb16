"""A pending instance says why it is pending, and is flagged as stuck past the grace, as
a stopping one is."""

from datetime import timedelta

from django.utils import timezone

from instances import transitions


def test_a_fresh_pending_instance_says_it_is_booting_and_not_billed(launch, bob, acme):
    instance = launch(bob, acme)
    assert not transitions.is_stuck(instance)
    assert "not billed until the host reports it running" in transitions.state_note(instance)


def test_pending_past_the_grace_is_stuck(launch, bob, acme, settings):
    settings.PENDING_GRACE_SECONDS = 600
    instance = launch(bob, acme, at=timezone.now() - timedelta(minutes=40))
    assert transitions.is_stuck(instance)
    assert "Stuck: the host has not confirmed the boot within 10 minutes" in transitions.state_note(instance)


def test_a_running_instance_is_never_stuck(acme_instance):
    later = timezone.now() + timedelta(days=3)
    assert not transitions.is_stuck(acme_instance, later)
    assert transitions.state_note(acme_instance, later) == ""
