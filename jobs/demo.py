"""Demo jobs, consistent with the demo fleet: the scheduler places them, so low-priority
jobs run only on GPUs no instance uses. Acme's nightly-eval took idle A100s,
yielded to Acme's on-demand fine-tune (notice, preemption, back to the head of the
queue) and resumed when that stopped; Globex renders on idle H200s; Acme's sweep waits
for idle H200s; a normal job ran and finished. Then the jobs' day is metered.
The story fits in the last hour, after the billing demo's history ends, so no GPU is
ever held twice. Idempotent: a second run adds nothing."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from billing import meter_runs as billing_meter_runs
from billing.pricing import floor_day
from console.models import Team
from console.request_context import recorded_at
from instances import lifecycle as instance_lifecycle
from instances import preemption as instance_preemption
from instances.models import GpuModel, PricingModel

from . import scheduler, submission
from .models import Job

# team, name, command, model, GPUs, priority, submitted minutes ago
JOBS = [
    ("Acme", "tokenize-corpus", "python tokenize.py --shards 512", "A100-80GB", 2, "normal", 55),
    ("Acme", "nightly-eval", "python eval.py --suite full --ckpt s3://acme/ckpt/latest", "A100-80GB", 4, "low", 50),
    ("Globex", "render-backfill", "blender -b scenes/city.blend -a", "H200-141GB", 8, "low", 30),
    ("Acme", "hparam-sweep", "python sweep.py --trials 64", "H200-141GB", 8, "low", 20),
]


def seed(*, users, stdout=None) -> None:
    if Job.objects.exists():
        return
    now = timezone.now().replace(microsecond=0)
    actors = {"Acme": users["bob"], "Globex": users["charlie"]}
    made = {}
    for team_name, name, command, model, count, priority, minutes_ago in JOBS:
        at = now - timedelta(minutes=minutes_ago)
        with recorded_at(at), transaction.atomic():
            made[name] = submission.submit_job(
                actor=actors[team_name], team=Team.objects.get(name=team_name), name=name, command=command,
                gpu_model=GpuModel.objects.get(name=model), gpu_count=count, priority=priority, now=at,
            )
        _pass(at + timedelta(minutes=1))
        if name == "tokenize-corpus":
            _finish(made[name], now - timedelta(minutes=52), actors["Acme"])
    _yield_and_resume(made["nightly-eval"], now - timedelta(minutes=40), now - timedelta(minutes=15), users["bob"])
    with transaction.atomic():
        billing_meter_runs.meter_window(actor=users["ops"], start=floor_day(now - timedelta(hours=1)), end=now, now=now)
    if stdout is not None:
        stdout.write(f"jobs: {Job.objects.count()} jobs, {Job.objects.filter(state='running').count()} running.")


def _pass(at) -> None:
    with recorded_at(at):
        result = scheduler.run_queue(now=at, provision=False)
    for job in result.started:
        with recorded_at(at + timedelta(seconds=60)):
            instance_lifecycle.mark_running(instance=job.instance, at=at + timedelta(seconds=60))


def _finish(job: Job, at, actor) -> None:
    job.refresh_from_db()
    with recorded_at(at):
        instance_lifecycle.terminate_instance(actor=actor, instance=job.instance, at=at)
    _pass(at)


def _yield_and_resume(job: Job, at, until, actor) -> None:
    """What a paying launch does when only a low-priority job's GPUs could hold it: the
    notice (as ``reclaim_spot_capacity`` gives it), the preemption when it runs out, the
    launch on the freed host; the job resumes when that instance stops."""
    job.refresh_from_db()
    notice = instance_preemption.DEFAULT_NOTICE
    with recorded_at(at):
        instance_preemption.issue_preemption_notice(actor="system", instance=job.instance, now=at,
                                                  reason=f"capacity needed for {job.gpu_count} × {job.gpu_model.name}")
    launched = at + notice
    with recorded_at(launched), transaction.atomic():
        instance_preemption.preempt_due(now=launched)
        # The launch that asked for the room takes it as it frees, in the same transaction:
        # the queue's pass that a preemption triggers (after commit) finds it taken.
        paying = instance_lifecycle.launch_instance(
            actor=actor, team=job.team, name="acme-a100-finetune", gpu_model=job.gpu_model, gpu_count=job.gpu_count,
            pricing_model=PricingModel.ON_DEMAND, at=launched, provision=False,
        )
        with recorded_at(launched + timedelta(seconds=60)):
            instance_lifecycle.mark_running(instance=paying, at=launched + timedelta(seconds=60))
    _pass(launched + timedelta(seconds=1))
    with recorded_at(until):
        instance_lifecycle.stop_instance(actor=actor, instance=paying, at=until, finish=False)
        instance_lifecycle.finish_stop(instance=paying, at=until)
    _pass(until)
