from audit.models import AuditEvent
from instances import cordon, lifecycle
from instances.models import NoticeStatus, PreemptionNotice


def _running(launch, user, team, **kw):
    return lifecycle.mark_running(instance=launch(user, team, **kw))


def test_drain_gives_spot_work_the_usual_notice(launch, bob, acme, ops, fleet):
    spot = _running(launch, bob, acme, name="cheap", model="H200-141GB", pricing="spot")
    drain = cordon.drain_host(actor=ops, host=fleet["hosts"]["h200-a"], reason="XID 79")
    assert drain.preempted == [spot]
    notice = PreemptionNotice.objects.get(instance=spot)
    assert notice.status == NoticeStatus.PENDING
    assert "host drained: XID 79" in notice.reason


def test_drain_lists_on_demand_work_for_the_operator_and_stops_nothing(launch, bob, acme, ops, fleet):
    paying = _running(launch, bob, acme, name="paying", model="H200-141GB")
    drain = cordon.drain_host(actor=ops, host=fleet["hosts"]["h200-a"])
    assert drain.to_move == [paying]
    paying.refresh_from_db()
    assert paying.state == "running"
    assert not PreemptionNotice.objects.exists()


def test_drain_cordons_the_host_and_touches_no_other_host(launch, bob, acme, charlie, globex, ops, fleet):
    here = _running(launch, bob, acme, name="here", count=8)
    other = _running(launch, charlie, globex, name="other", count=8, pricing="spot")
    drain = cordon.drain_host(actor=ops, host=here.host)
    assert drain.host.cordoned_at is not None
    assert drain.to_move == [here]
    assert other not in drain.preempted and not PreemptionNotice.objects.filter(instance=other).exists()


def test_drain_is_audited_with_what_it_did(launch, bob, acme, ops, fleet):
    spot = _running(launch, bob, acme, name="cheap", model="H200-141GB", pricing="spot")
    cordon.drain_host(actor=ops, host=fleet["hosts"]["h200-a"])
    event = AuditEvent.objects.get(action="host.drain")
    assert event.details["preempted"] == [spot.pk]
