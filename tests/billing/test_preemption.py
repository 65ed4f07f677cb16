from datetime import timedelta
from decimal import Decimal

import pytest
from billing_support import at

from audit.models import AuditEvent
from billing.models import Charge
from console import live
from instances import lifecycle, preemption, transitions
from instances.models import NoticeStatus, PreemptionNotice


@pytest.fixture
def spot_job(play, bob, acme):
    return play(bob, acme, runs=[(at(3, 10), None, "")], count=2, pricing="spot")


@pytest.fixture
def published(monkeypatch):
    sent = []
    monkeypatch.setattr(live, "publish", lambda groups, event, data: sent.append((groups, event, data)))
    return sent


def test_a_notice_is_recorded_audited_and_pushed_live(spot_job, ops, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        notice = preemption.issue_preemption_notice(actor=ops, instance=spot_job, now=at(3, 10, 20))
    assert notice.preempt_at == at(3, 10, 22)
    assert AuditEvent.objects.filter(action="billing.preemption.notice", team=spot_job.team_id).exists()
    groups, event, data = published[-1]
    assert (groups, event, data.name, data.seconds) == ([f"team.{spot_job.team_id}"], "preemption", "job", 120)


def test_the_instance_is_preempted_when_the_notice_runs_out(spot_job, ops):
    preemption.issue_preemption_notice(actor=ops, instance=spot_job, now=at(3, 10, 20))
    assert preemption.preempt_due(now=at(3, 10, 21)) == []
    preemption.preempt_due(now=at(3, 10, 22))
    spot_job.refresh_from_db()
    assert spot_job.state == "preempted"
    assert PreemptionNotice.objects.get().status == NoticeStatus.DONE


def test_a_run_preempted_after_its_notice_within_the_first_hour_is_free(spot_job, ops, meter):
    preemption.issue_preemption_notice(actor=ops, instance=spot_job, now=at(3, 10, 20))
    preemption.preempt_due(now=at(3, 10, 22))
    meter(now=at(4))
    assert Charge.objects.get().billed_cost == Decimal("0.00")


def test_an_instance_stopped_before_its_notice_runs_out_is_left_alone(spot_job, ops, bob):
    preemption.issue_preemption_notice(actor=ops, instance=spot_job, now=at(3, 10, 20))
    lifecycle.terminate_instance(actor=bob, instance=spot_job, at=at(3, 10, 21))
    preemption.preempt_due(now=at(3, 10, 25))
    assert PreemptionNotice.objects.get().status == NoticeStatus.MOOT


def test_only_running_spot_instances_get_a_notice(play, bob, acme, ops):
    on_demand = play(bob, acme, runs=[(at(3, 10), None, "")])
    with pytest.raises(transitions.LifecycleError, match="only spot instances"):
        preemption.issue_preemption_notice(actor=ops, instance=on_demand)


def test_operators_issue_notices_through_the_api(spot_job, api, ops, alice):
    url = "/api/v1/preemption-notices/"
    assert api(alice).post(url, {"instance": spot_job.pk}).status_code == 403
    response = api(ops).post(url, {"instance": spot_job.pk, "notice_seconds": 300})
    assert response.status_code == 201
    assert PreemptionNotice.objects.get().preempt_at - PreemptionNotice.objects.get().notice_at == timedelta(seconds=300)


def test_a_team_sees_its_own_notices_only(spot_job, api, ops, alice, charlie):
    preemption.issue_preemption_notice(actor=ops, instance=spot_job)
    assert api(alice).get("/api/v1/preemption-notices/").json()["count"] == 1
    assert api(charlie).get("/api/v1/preemption-notices/").json()["count"] == 0


def test_one_notice_that_cannot_be_carried_out_does_not_stop_the_others(play, bob, acme, ops, monkeypatch):
    first = play(bob, acme, name="first", runs=[(at(3, 10), None, "")], pricing="spot")
    second = play(bob, acme, name="second", runs=[(at(3, 10), None, "")], pricing="spot")
    for job in (first, second):
        preemption.issue_preemption_notice(actor=ops, instance=job, now=at(3, 10, 20))
    real = preemption.preempt_instance

    def broken(*, instance, **kwargs):
        if instance.name == "first":
            raise transitions.LifecycleError("the host refused")
        return real(instance=instance, **kwargs)

    monkeypatch.setattr(preemption, "preempt_instance", broken)
    preemption.preempt_due(now=at(3, 10, 22))
    statuses = dict(PreemptionNotice.objects.values_list("instance__name", "status"))
    assert statuses == {"first": NoticeStatus.FAILED, "second": NoticeStatus.DONE}
    assert AuditEvent.objects.filter(action="billing.preemption.done", outcome="failure").count() == 1
