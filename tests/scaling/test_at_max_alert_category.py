"""A scaling group at its maximum with work waiting is a capacity alert, not a
telemetry one: the alerts page files it under Capacity."""

from django.utils import timezone

from alerting.models import Alert, AlertKind, Category
from scaling import alerting
from scaling.models import Reason, ScalingDecision


def test_the_at_max_alert_is_filed_under_capacity(client, bob, group):
    decision = ScalingDecision(group=group, time=timezone.now(), queue_depth=100, desired=4, running=4,
                               reason=Reason.AT_MAX)
    alerting.reconcile([decision], now=timezone.now())
    alert = Alert.objects.get(kind=AlertKind.SCALING_AT_MAX)
    assert alert.category == Category.CAPACITY
    client.force_login(bob)
    page = client.get("/alerts/?state=active&category=capacity").content.decode()
    assert "is at its maximum of 4 instances" in page
    assert "is at its maximum" not in client.get("/alerts/?state=active&category=telemetry").content.decode()
