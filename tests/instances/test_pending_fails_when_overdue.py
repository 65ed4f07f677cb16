"""An instance whose host never confirms the boot is stuck after the grace and fails
after PENDING_FAIL_SECONDS: its GPUs are given back and it was never billed."""

from datetime import timedelta

from django.utils import timezone

from audit.models import AuditEvent
from billing import meter_runs as billing_meter_runs
from billing.models import Charge
from instances import lifecycle, transitions
from instances.models import Gpu, State


def test_an_overdue_pending_instance_fails_and_gives_its_gpus_back(launch, bob, acme, settings):
    settings.PENDING_FAIL_SECONDS = 1800
    now = timezone.now()
    late = launch(bob, acme, name="acme-never-boots", count=2, at=now - timedelta(minutes=31))
    fresh = launch(bob, acme, name="acme-booting", at=now - timedelta(minutes=5))
    assert lifecycle.fail_overdue(now=now) == [late]
    late.refresh_from_db()
    fresh.refresh_from_db()
    assert (late.state, fresh.state) == (State.FAILED, State.PENDING)
    assert not Gpu.objects.filter(instance=late).exists()
    event = AuditEvent.objects.get(action="instance.fail", target_id=str(late.pk))
    assert "did not confirm the boot within 31 minutes" in event.details["reason"]
    billing_meter_runs.meter_window(actor="system", start=now - timedelta(hours=1), end=now, now=now)
    assert not Charge.objects.filter(instance=late).exists()


def test_a_stuck_pending_instance_says_when_it_fails(launch, bob, acme, settings):
    settings.PENDING_GRACE_SECONDS, settings.PENDING_FAIL_SECONDS = 600, 1800
    at = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=15)
    instance = launch(bob, acme, at=at)
    assert f"or it fails at {at + timedelta(minutes=30):%Y-%m-%d %H:%M} UTC" in transitions.state_note(instance)


def test_charlies_pending_instance_is_failed_too_and_bobs_running_one_is_not(launch, bob, charlie, acme, globex):
    now = timezone.now()
    running = lifecycle.mark_running(instance=launch(bob, acme, at=now - timedelta(hours=2)), at=now - timedelta(hours=2))
    pending = launch(charlie, globex, name="globex-never-boots", at=now - timedelta(hours=1))
    assert lifecycle.fail_overdue(now=now) == [pending]
    running.refresh_from_db()
    assert running.state == State.RUNNING
