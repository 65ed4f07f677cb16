"""The two alerts about one spot instance over its max price quote the spot price each
saw, and say when: the preemption alert the price at the notice (its time), the
max-price alert the price at its evaluation. A price that moved between them no longer
reads as two alerts disagreeing."""

from datetime import timedelta

from django.utils import timezone

from alerting import periodic
from alerting.models import Alert
from billing import price_changes as billing_price_changes
from instances import lifecycle as instance_lifecycle
from instances.models import PreemptionNotice


def test_each_alert_says_which_price_it_quotes(launch, bob, acme, ops):
    instance = instance_lifecycle.mark_running(
        instance=launch(bob, acme, name="sweep", pricing="spot", max_price="0.50"))
    t0 = timezone.now().replace(microsecond=0) - timedelta(seconds=50)
    billing_price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly="0.60", now=t0)  # gives the notice
    notice = PreemptionNotice.objects.get(instance=instance)
    t1 = t0 + timedelta(seconds=30)
    billing_price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly="0.70", now=t1)
    periodic.evaluate(now=t1 + timedelta(seconds=5))
    preemption = Alert.objects.get(kind="preemption", instance=instance)
    spot_max = Alert.objects.get(kind="spot_max", instance=instance)
    assert "0.60/GPU-hour" in preemption.message
    assert f"(notice given at {notice.notice_at:%H:%M:%S} UTC)" in preemption.message
    assert "0.70/GPU-hour at " + f"{t1 + timedelta(seconds=5):%H:%M} UTC" in spot_max.message
