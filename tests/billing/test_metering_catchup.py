from decimal import Decimal

from billing_support import at

from billing import meter_runs
from billing.models import Charge, MeterState


def test_a_missed_run_catches_up_from_where_metering_stopped(play, bob, acme):
    play(bob, acme, runs=[(at(3, 10), None, "")])
    meter_runs.meter_recent(now=at(3, 11))
    meter_runs.meter_recent(now=at(5, 11))  # the runs in between never happened
    assert sum(c.billed_cost for c in Charge.objects.all()) == Decimal("98.00")
    assert MeterState.objects.get().metered_until == at(5, 11)


def test_a_run_that_ended_since_the_last_pass_gets_its_minimum(play, bob, acme):
    job = play(bob, acme, runs=[(at(3, 23, 59, 50), None, "")])
    meter_runs.meter_recent(now=at(3, 23, 59, 55))
    from instances import lifecycle as instance_lifecycle

    instance_lifecycle.terminate_instance(actor=bob, instance=job, at=at(4, 0, 0, 5))
    meter_runs.meter_recent(now=at(4, 0, 5))
    assert sum(Charge.objects.values_list("priced_seconds", flat=True)) == 60


def test_metering_is_audited(play, bob, acme):
    from audit.models import AuditEvent

    play(bob, acme, runs=[(at(3, 10), at(3, 11), "terminate")])
    MeterState.objects.create(id=1, metered_until=at(3, 11))
    meter_runs.meter_recent(now=at(3, 12))
    assert AuditEvent.objects.filter(action="billing.meter").count() == 1


def test_a_long_catch_up_runs_a_day_at_a_time_and_moves_the_mark_each_day(play, bob, acme, monkeypatch):
    play(bob, acme, runs=[(at(3, 10), None, "")])
    MeterState.objects.create(id=1, metered_until=at(3, 11))
    marks = []
    real = meter_runs.meter_window

    def spy(**kwargs):
        marks.append((kwargs["start"], kwargs["end"], MeterState.objects.get().metered_until))
        return real(**kwargs)

    monkeypatch.setattr(meter_runs, "meter_window", spy)
    meter_runs.meter_recent(now=at(6, 11))  # three days missed
    assert [(s, e) for s, e, _ in marks] == [(at(3, 9), at(4)), (at(4), at(5)), (at(5), at(6)), (at(6), at(6, 11))]
    assert [m for _, _, m in marks] == [at(3, 11), at(4), at(5), at(6)]
    assert sum(c.billed_cost for c in Charge.objects.all()) == Decimal("146.00")
