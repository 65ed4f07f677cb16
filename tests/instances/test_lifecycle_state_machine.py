"""Launch, stop, start, preempt, requeue and terminate in random orders, by hand and
through the job queue and a scaling group, on one clock that only moves forward. After
every step: nothing left a final state, events run forward in time, refused verbs
changed nothing and only holding instances hold GPUs. After each real metering run:
what an ended instance (or an ended job) costs never grows again."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from billing import meter_runs as billing_meter_runs
from billing import price_changes as billing_price_changes
from billing.models import Charge, UsageRecord
from instances import lifecycle, preemption, transitions
from instances.models import FINAL_STATES, HOLDING_STATES, Gpu, GpuModel, GpuSlice, Instance, State
from jobs import queue_status as job_queue_status
from jobs import scheduler as job_scheduler
from jobs import submission as job_submission
from jobs.models import Job, JobRun, JobState
from scaling import services as scaling_services

ENDED = (*FINAL_STATES, State.PREEMPTED)
VERBS = {
    "run": lambda i, at: lifecycle.mark_running(instance=i, at=at),
    "stop": lambda i, at: lifecycle.stop_instance(actor="system", instance=i, at=at, finish=False),
    "stopped": lambda i, at: lifecycle.finish_stop(instance=i, at=at),
    "start": lambda i, at: lifecycle.start_instance(actor="system", instance=i, at=at, provision=False),
    "preempt": lambda i, at: preemption.preempt_instance(instance=i, at=at),
    "terminate": lambda i, at: lifecycle.terminate_instance(actor="system", instance=i, at=at),
    "fail": lambda i, at: lifecycle.fail_instance(instance=i, reason="boot timed out", at=at),
}


class Lifecycle(RuleBasedStateMachine):
    world: dict = {}

    def __init__(self):
        super().__init__()
        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        self.origin = self.clock = timezone.now().replace(microsecond=0) - timedelta(hours=6)
        self.h100 = GpuModel.objects.get(name="H100-80GB")
        self.group = scaling_services.create_group(
            actor=self.world["bob"], team=self.world["acme"], name="workers", gpu_model=self.h100, gpus_per_instance=1,
            pricing_model="spot", min_instances=0, max_instances=3, target_per_instance=10, scale_out_cooldown_s=60,
            scale_in_cooldown_s=60, now=self.clock)
        self.seen_final: dict[int, int] = {}
        self.ended_cents: dict[int, int] = {}
        self.ended_jobs: dict[int, int] = {}
        self.count = 0

    def teardown(self):
        transaction.set_rollback(True)
        self._atomic.__exit__(None, None, None)

    def _pick(self, n: int) -> Instance | None:
        ids = list(Instance.objects.order_by("id").values_list("id", flat=True))
        return Instance.objects.get(pk=ids[n % len(ids)]) if ids else None

    @rule(minutes=st.integers(1, 180))
    def wait(self, minutes):
        self.clock += timedelta(minutes=minutes)

    @rule(pricing=st.sampled_from(["on_demand", "spot"]), count=st.integers(1, 8), team=st.sampled_from(["acme", "globex"]))
    def launch(self, pricing, count, team):
        self.count += 1
        try:
            lifecycle.launch_instance(actor="system", team=self.world[team], name=f"i{self.count}", gpu_model=self.h100,
                                     gpu_count=count, pricing_model=pricing, at=self.clock, provision=False)
        except transitions.LifecycleError:
            pass  # no room (spot instances may have been given notice)

    @rule(verb=st.sampled_from(sorted(VERBS)), n=st.integers(0, 100), back=st.sampled_from([0, 0, 0, 45]))
    def act(self, verb, n, back):
        """A verb now, or dated ``back`` minutes ago (as a late report from a host would be)."""
        instance = self._pick(n)
        if instance is None:
            return
        before = (instance.state, instance.events.count())
        try:
            VERBS[verb](instance, self.clock - timedelta(minutes=back))
        except transitions.LifecycleError:
            instance.refresh_from_db()
            assert (instance.state, instance.events.count()) == before, f"a refused {verb} changed {instance}"

    @rule()
    def notices_run_out(self):
        preemption.preempt_due(now=self.clock)

    @rule(count=st.integers(1, 8), priority=st.sampled_from(["low", "normal"]))
    def submit(self, count, priority):
        self.count += 1
        job_submission.submit_job(actor=self.world["bob"], team=self.world["acme"], name=f"j{self.count}",
                                command="python train.py", gpu_model=self.h100, gpu_count=count, priority=priority,
                                now=self.clock)

    @rule()
    def queue_pass(self):
        job_scheduler.run_queue(now=self.clock, provision=False)

    @rule(n=st.integers(0, 100))
    def cancel(self, n):
        jobs = list(Job.objects.order_by("id"))
        if jobs:
            try:
                job_submission.cancel_job(actor=self.world["bob"], job=jobs[n % len(jobs)], now=self.clock)
            except job_submission.JobConflict:
                pass

    @rule(depth=st.integers(0, 40))
    def scale(self, depth):
        scaling_services.push_queue_depth(group=self.group, queue_depth=depth, now=self.clock)
        scaling_services.evaluate_group(self.group, now=self.clock, provision=False)

    @rule()
    def meter(self):
        billing_meter_runs.meter_window(actor="system", start=self.origin, end=self.clock + timedelta(seconds=1),
                                      now=self.clock + timedelta(seconds=1))
        cents = dict(Charge.objects.filter(instance__isnull=False).values("instance").annotate(c=Sum("billed_cents"))
                     .values_list("instance", "c"))
        for pk, before in self.ended_cents.items():
            assert cents.get(pk, 0) == before, f"instance {pk} was charged after it ended"
        for pk, state, end in Instance.objects.values_list("pk", "state", "state_changed_at"):
            if state in ENDED:
                self.ended_cents.setdefault(pk, cents.get(pk, 0))
                late = UsageRecord.objects.filter(instance_id=pk, end__gt=end)
                assert not late.exists(), f"instance {pk} has usage after it became {state} at {end}"
        costs = job_queue_status.job_costs(list(Job.objects.values_list("pk", flat=True)))
        for job in Job.objects.exclude(state__in=(JobState.QUEUED, JobState.RUNNING)):
            self.ended_jobs.setdefault(job.pk, costs.get(job.pk, 0))
            assert costs.get(job.pk, 0) == self.ended_jobs[job.pk], f"job {job} cost more after it ended"

    @invariant()
    def nothing_leaves_a_final_state(self):
        for instance in Instance.objects.prefetch_related("events"):
            events = list(instance.events.all().order_by("id"))
            times = [e.time for e in events]
            assert times == sorted(times), f"{instance} has events out of time order"
            assert not any(e.from_state in FINAL_STATES for e in events), f"{instance} left a final state"
            if instance.pk in self.seen_final:
                assert len(events) == self.seen_final[instance.pk], f"{instance} changed after it ended"
            elif instance.state in FINAL_STATES:
                self.seen_final[instance.pk] = len(events)

    @invariant()
    def only_holders_hold_gpus(self):
        holders = set(Gpu.objects.filter(instance__isnull=False).values_list("instance__state", flat=True))
        holders |= set(GpuSlice.objects.filter(instance__isnull=False).values_list("instance__state", flat=True))
        assert holders <= set(HOLDING_STATES)

    @invariant()
    def each_run_of_a_job_is_a_new_instance(self):
        for job in Job.objects.filter(state=JobState.RUNNING):
            last = JobRun.objects.filter(job=job).order_by("-started_at", "-id").first()
            assert last is not None and last.instance_id == job.instance_id
        runs = list(JobRun.objects.values_list("instance_id", flat=True))
        assert len(runs) == len(set(runs))


@pytest.fixture
def idle_price(fleet):
    from datetime import UTC, datetime

    since = datetime(2000, 1, 1, tzinfo=UTC)
    billing_price_changes.set_price(actor="system", sku="H100-80GB", kind="idle", hourly="0.25", effective_from=since,
                               now=since)


def test_the_lifecycle_only_moves_forward_and_ended_instances_cost_nothing_more(idle_price, acme, globex, bob):
    Lifecycle.world = {"acme": acme, "globex": globex, "bob": bob}
    run_state_machine_as_test(Lifecycle, settings=settings(
        # No shrinking: a failure prints its steps at once rather than minutes later.
        max_examples=8, stateful_step_count=25, deadline=None, database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]))
