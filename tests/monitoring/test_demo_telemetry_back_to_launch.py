"""The demo's telemetry reaches back to each allocation's start (1-hour rollups before
the two days of 1-minute ones), so a closed month's idle cost has telemetry for every
instance billed in it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing import demo as billing_demo
from billing import pricing
from billing.models import Charge
from gpuconsole import demo as console_demo
from instances import demo as instances_demo
from instances.models import GpuHold, Instance
from monitoring import demo
from monitoring.activity import activity_by_gpu, activity_by_instance, exact_hours
from monitoring.models import Rollup1h, Rollup1m, RollupCursor


@pytest.fixture
def seeded(db, settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    monkeypatch.setattr(demo, "HISTORY", timedelta(hours=3))  # the demo keeps two days of minutes
    monkeypatch.setattr(demo, "ADVICE_HISTORY", timedelta(hours=3))  # and a week for rightsizing
    users = console_demo.seed()
    instances_demo.seed_fleet(actor=users["ops"])
    billing_demo.seed_catalog(users=users)
    instances_demo.seed_instances(users=users)
    billing_demo.seed(users=users)
    demo.seed(users=users)
    return users


def test_every_hold_has_hourly_telemetry_from_its_start_and_last_month_has_idle_cost(seeded):
    # one test: seeding billing's months is the slow part
    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)  # whole hours only
    # A hold whose first whole minute is this hour's (one begun in the last minute of the
    # hour before) has no whole hour rolled up yet.
    for hold in GpuHold.objects.filter(start__lte=this_hour - timedelta(minutes=1)).select_related("instance"):
        # minute rollups begin at the first whole minute held, which may be the next hour's
        first = {t.replace(minute=0, second=0, microsecond=0) for t in (hold.start, hold.start + timedelta(minutes=1))}
        assert Rollup1h.objects.filter(instance=hold.instance, gpu=hold.gpu, bucket__in=first).exists(), hold
    end = pricing.month_start(timezone.now())
    start = pricing.month_start(end - timedelta(days=1))
    billed = set(Charge.objects.filter(period_start__gte=start, period_start__lt=end, instance__isnull=False)
                 .values_list("instance_id", flat=True))
    observed = activity_by_instance(sorted(billed), start, end)
    # An A100's MIG slice reports no activity (no GPM before Hopper): its idle share is
    # unknown, so none of its seconds count as observed.
    blind = set(Instance.objects.filter(pk__in=billed, slice_profile__gpu_model__name__startswith="A100")
                .values_list("pk", flat=True))
    assert billed - blind and blind
    assert all((seconds > 0) == (iid not in blind) for iid, (seconds, _idle) in observed.items())
    # The seeded hours carry their minutes' idle seconds: read from them, the idle
    # figures of the hours with minutes are those of the minutes themselves.
    ids = list(GpuHold.objects.values_list("instance_id", flat=True).distinct())
    since, until = this_hour - timedelta(hours=3), timezone.now()
    assert exact_hours(since, until) == (since, this_hour)
    from_hours = activity_by_gpu(ids, since, until)
    RollupCursor.objects.filter(name="1h").update(idle_from=None)
    assert from_hours == activity_by_gpu(ids, since, until)
    assert any(idle for _seconds, idle in from_hours.values())
    # A whole GPU reports NVML's GPM metrics from Hopper on only, in its history as the
    # simulated agent does live: no tensor-core activity for a whole A100.
    for model in Rollup1m, Rollup1h:
        whole = model.objects.filter(slice__isnull=True)
        assert whole.filter(gpu__model__name__startswith="A100").exists()
        assert not whole.filter(gpu__model__name__startswith="A100", tensor_active_pct_avg__isnull=False).exists()
        assert whole.filter(gpu__model__name__startswith="H100", tensor_active_pct_avg__isnull=False).exists()
