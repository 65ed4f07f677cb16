"""The demo group's history obeys the rules it shows: desired from the queue within the
bounds, changes only after their cooldowns, and the at-max alert opened and resolved."""

import math

import pytest

from alerting.models import Alert, AlertKind, AlertState
from billing import demo as billing_demo
from gpuconsole import demo as console_demo
from instances import demo as instances_demo
from scaling import demo as scaling_demo
from scaling.models import ScalingGroup


@pytest.fixture
def seeded(db):
    users = console_demo.seed()
    instances_demo.seed_fleet(actor=users["ops"])
    billing_demo.seed_catalog(users=users)
    instances_demo.seed_instances(users=users)
    scaling_demo.seed(users=users)
    scaling_demo.seed(users=users)  # a second run adds nothing
    return ScalingGroup.objects.get(name=scaling_demo.NAME)


def test_the_demo_history_obeys_the_rules(seeded):
    group = seeded
    decisions = list(group.decisions.order_by("time", "id"))
    assert len(decisions) == scaling_demo.MINUTES + 1
    last_out = last_change = None
    for d in decisions:
        want = math.ceil(d.queue_depth / group.target_per_instance)
        assert d.desired == max(group.min_instances, min(group.max_instances, want))
        if d.action == "scale_out":
            assert last_out is None or (d.time - last_out).total_seconds() >= group.scale_out_cooldown_s
            last_out = last_change = d.time
        elif d.action == "scale_in":
            assert (d.time - last_change).total_seconds() >= group.scale_in_cooldown_s
            last_change = d.time
    seen = {d.reason for d in decisions}
    assert {"queue_depth", "at_max", "at_min", "cooldown"} <= seen
    assert max(d.running for d in decisions) == group.max_instances
    assert decisions[-1].running == 2
    alert = Alert.objects.get(kind=AlertKind.SCALING_AT_MAX)
    assert alert.state == AlertState.RESOLVED and alert.team_id == group.team_id
