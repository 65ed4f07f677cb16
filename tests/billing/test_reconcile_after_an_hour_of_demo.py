"""The seeded demo, played forward an hour (spot market, preemptions, queue passes,
scaling decisions, provisioning, metering), still reconciles: nothing is billed after
an instance's end and every job costs its instances' charges."""

import io
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing import reconcile
from billing.models import Charge
from gpuconsole import demo_clock
from instances.models import HOLDING_STATES, Instance, LifecycleEvent

HOUR = timedelta(hours=1)


@contextmanager
def clock_at(moment):
    """``timezone.now()`` reads ``moment`` plus the time since, as a demo started then."""
    real = timezone.now
    shift = real() - moment
    with mock.patch("django.utils.timezone.now", lambda: real() - shift):
        yield


@pytest.fixture
def played(db, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    end = timezone.now().replace(microsecond=0)
    start = end - HOUR
    with clock_at(start):
        call_command("seed_demo", stdout=io.StringIO(), stderr=io.StringIO())
    return start, demo_clock.advance(start=start, end=end)


def test_after_an_hour_of_demo_nothing_is_billed_after_an_end_and_reconcile_passes(played):
    start, played = played
    assert played.ticks == 60
    assert played.launched and played.scaling_changes
    assert Instance.objects.exclude(state__in=HOLDING_STATES).filter(state_changed_at__gte=start).exists()
    # the boot its host never confirmed failed after 30 minutes and gave its GPUs back
    assert played.failed == 1 and Instance.objects.get(name="acme-new-job").state == "failed"
    assert reconcile.usage_after_end() == []
    assert reconcile.job_costs_differ() == []
    ended = {i.pk: i.state_changed_at for i in Instance.objects.exclude(state__in=HOLDING_STATES)}
    for pk, day in Charge.objects.filter(instance_id__in=list(ended)).values_list("instance_id", "period_start"):
        assert day <= ended[pk]
    for instance_id in Instance.objects.values_list("pk", flat=True):
        times = list(LifecycleEvent.objects.filter(instance_id=instance_id).order_by("id").values_list("time", flat=True))
        assert times == sorted(times), instance_id
    out = io.StringIO()
    call_command("reconcile_costs", stdout=out)
    assert "nothing is billed after an instance's end" in out.getvalue()
