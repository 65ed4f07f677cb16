"""The scheduler's pass (``run_queue``): running jobs settled, late ones expired, and
waiting ones started in queue order where their GPUs fit. A job runs as an instance
launched through ``instances.lifecycle``: a low-priority job under the ``idle`` pricing
model (billed at the idle-capacity price, preemptible), a normal one on-demand.
Low-priority instances get the same preemption notice as spot when a paying launch needs
their GPUs (``instances.preemption.reclaim_spot_capacity``); the pass then puts the job
back at the head of the queue and resumes it, as a new run, once idle capacity frees."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event
from instances import lifecycle as instance_lifecycle
from instances import placement as instance_placement
from instances import transitions as instance_transitions
from instances.models import (
    HOLDING_STATES,
    GpuModel,
    Host,
    Instance,
    NoticeStatus,
    PreemptionNotice,
    PricingModel,
    State,
)
from network import interfaces as network_interfaces

from .models import (
    PRIORITY_RANK,
    EventKind,
    Job,
    JobRun,
    JobState,
    Priority,
)
from .queue_status import wait_text
from .submission import close_run, head_key, record_job_event


def reclaim_hold() -> timedelta:
    """How long after a preemption notice a host's freed GPUs are left to the paying
    launch that asked for them, before low-priority jobs may use them again."""
    return timedelta(seconds=getattr(settings, "JOBS_RECLAIM_HOLD_SECONDS", 600))


@dataclass
class Pass:
    started: list[Job] = field(default_factory=list)
    requeued: list[Job] = field(default_factory=list)
    finished: list[Job] = field(default_factory=list)
    expired: list[Job] = field(default_factory=list)


def run_queue(*, now: datetime | None = None, provision: bool = True) -> Pass:
    """One pass of the scheduler: note what happened to running jobs' instances
    (preempted → back to the head of the queue; stopped → finished), expire queued jobs
    past their deadline, then start queued jobs where capacity is idle: per GPU model,
    normal before low, then queue order. A job that cannot start holds back those
    behind it for the same model, so large jobs are not starved by small ones. Each
    job changes in its own transaction."""
    now = now or timezone.now()
    result = Pass()
    for pk in Job.objects.filter(state=JobState.RUNNING).exclude(instance__state__in=HOLDING_STATES).values_list(
        "pk", flat=True
    ):
        job = _settle(pk, now)
        if job is not None:
            (result.requeued if job.state == JobState.QUEUED else result.finished).append(job)
    for pk in Job.objects.filter(state=JobState.QUEUED, deadline__lte=now).values_list("pk", flat=True):
        job = _expire(pk, now)
        if job is not None:
            result.expired.append(job)
    queued = list(Job.objects.filter(state=JobState.QUEUED).select_related("gpu_model", "team"))
    by_model: dict[int, list[Job]] = {}
    for job in sorted(queued, key=queue_order):
        by_model.setdefault(job.gpu_model_id, []).append(job)
    for jobs in by_model.values():
        result.started += _start_in_order(jobs, now, provision)
    return result


def queue_order(job: Job) -> tuple:
    return (PRIORITY_RANK[job.priority], job.queue_key, job.pk)


@transaction.atomic
def _settle(pk: int, now: datetime) -> Job | None:
    job = Job.objects.select_for_update().get(pk=pk)
    instance = job.instance
    if job.state != JobState.RUNNING or instance is None or instance.state in HOLDING_STATES:
        return None
    if instance.state == State.PREEMPTED:
        return _requeue(job, instance, now)
    if instance.state == State.FAILED:
        return _retry(job, instance)
    close_run(job, instance.state_changed_at, f"instance {instance.state}")
    job.state, job.ended_at = JobState.FINISHED, instance.state_changed_at
    job.save(update_fields=["state", "ended_at"])
    record_job_event(job, EventKind.FINISH, instance.state_changed_at, f"its instance {instance.name} was {instance.state}", instance)
    record_event(actor="system", action="job.finish", target=job, team=job.team_id,
                 details={"instance": instance.pk, "instance_state": instance.state})
    return job


def _requeue(job: Job, instance: Instance, now: datetime) -> Job:
    at = instance.state_changed_at
    notice = PreemptionNotice.objects.filter(instance=instance).order_by("-notice_at").first()
    why = notice.reason if notice is not None else "capacity reclaimed"
    close_run(job, at, f"preempted: {why}")
    job.state, job.queue_key = JobState.QUEUED, head_key()
    job.preempted_at, job.waiting_since, job.preempt_reason, job.wait_note = at, at, why[:200], ""
    job.save(update_fields=["state", "queue_key", "preempted_at", "waiting_since", "preempt_reason", "wait_note"])
    record_job_event(job, EventKind.PREEMPT, at, f"preempted by a paying launch ({why}); back at the head of the queue", instance)
    record_event(actor="system", action="job.preempt", target=job, team=job.team_id,
                 details={"instance": instance.pk, "reason": why, "requeued": "head"})
    return job


def _retry(job: Job, instance: Instance) -> Job:
    """Its instance never started (the host did not confirm the boot): the job did not
    run, so it goes back to the head of the queue and its next run is a new instance."""
    at = instance.state_changed_at
    why = instance.events.filter(to_state=State.FAILED).values_list("reason", flat=True).last() or "failed to start"
    close_run(job, at, f"instance failed: {why}")
    job.state, job.queue_key, job.waiting_since, job.wait_note = JobState.QUEUED, head_key(), at, ""
    job.save(update_fields=["state", "queue_key", "waiting_since", "wait_note"])
    record_job_event(job, EventKind.RETRY, at, f"its instance {instance.name} failed to start ({why}); back at the head of the "
                                     "queue", instance)
    record_event(actor="system", action="job.retry", target=job, team=job.team_id,
                 details={"instance": instance.pk, "reason": why, "requeued": "head"})
    return job


@transaction.atomic
def _expire(pk: int, now: datetime) -> Job | None:
    job = Job.objects.select_for_update().get(pk=pk)
    if job.state != JobState.QUEUED or job.deadline is None or job.deadline > now:
        return None
    job.state, job.ended_at, job.wait_note = JobState.EXPIRED, now, ""
    job.save(update_fields=["state", "ended_at", "wait_note"])
    record_job_event(job, EventKind.EXPIRE, now, f"still queued at its deadline {job.deadline:%Y-%m-%d %H:%M} UTC; not started")
    record_event(actor="system", action="job.expire", target=job, team=job.team_id, details={"deadline": job.deadline})
    return job


def held_hosts(gpu_model: GpuModel, now: datetime) -> set[int]:
    """Hosts whose GPUs were reclaimed (a preemption notice there within the hold) for a
    paying launch that has not launched there since: low-priority jobs leave them be."""
    since = now - reclaim_hold()
    notices = (
        PreemptionNotice.objects.filter(notice_at__gte=since, instance__gpu_model=gpu_model)
        .exclude(status=NoticeStatus.FAILED).values_list("instance__host_id", "notice_at")
    )
    held = set()
    for host_id, at in notices:
        taken = (Instance.objects.filter(host_id=host_id, created_at__gte=at)
                 .exclude(pricing_model=PricingModel.IDLE).exists())
        if host_id is not None and not taken:
            held.add(host_id)
    return held


def _start_in_order(jobs: list[Job], now: datetime, provision: bool) -> list[Job]:
    model = jobs[0].gpu_model
    free = instance_placement.free_gpus_by_host(gpu_model=model)
    held = held_hosts(model, now)
    started = []
    for job in jobs:
        low = job.priority == Priority.LOW
        room = {h: n for h, n in free.items() if not (low and h in held)}
        fits = [h for h, n in room.items() if n >= job.gpu_count]
        if low and not fits:
            _note(job, _no_idle_capacity(job, room, held))
            break
        host = min(fits, key=lambda h: (room[h], h)) if fits else None
        job = _start(job.pk, host, now, provision)
        if job is None:
            continue
        if job.state != JobState.RUNNING:
            break
        started.append(job)
        free[job.instance.host_id] = free.get(job.instance.host_id, 0) - job.gpu_count
    return started


def _no_idle_capacity(job: Job, room: dict[int, int], held: set[int]) -> str:
    most = max(room.values(), default=0)
    text = (f"No idle capacity of {job.gpu_model.name}: it needs {job.gpu_count} GPUs on one host (one NVLink "
            f"group); the most idle there is {most}.")
    if held:
        names = ", ".join(sorted(Host.objects.filter(pk__in=held).values_list("name", flat=True)))
        text += f" ({names} held for a paying launch after a reclaim.)"
    return text


def _note(job: Job, text: str) -> None:
    if job.wait_note != text:
        Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(wait_note=text[:300])


@transaction.atomic
def _start(pk: int, host: Host | int | None, now: datetime, provision: bool) -> Job | None:
    job = Job.objects.select_for_update().select_related("gpu_model", "team").get(pk=pk)
    if job.state != JobState.QUEUED:
        return None
    runs = job.runs.count()
    options = {"host": Host.objects.get(pk=host)} if isinstance(host, int) else {}
    try:
        # A normal job's launch is paying work: short of capacity, it gives notice to
        # low-priority jobs and spot instances, as any on-demand launch does.
        with network_interfaces.launching_on(actor="system", team=job.team, choice=job.network):
            instance = instance_lifecycle.launch_instance(
                actor="system", team=job.team, name=f"{job.name[:50]}-run-{runs + 1}", gpu_model=job.gpu_model,
                gpu_count=job.gpu_count, pricing_model=job.pricing_model, provision=provision, at=now,
                labels={"job": job.code}, image=job.image, **options,
            )
    except instance_transitions.LifecycleError as exc:
        _note(job, str(exc))
        job.refresh_from_db()
        return job
    except ValidationError as exc:  # its image, subnet or a group is gone since: it waits, holding back no one
        _note(job, " ".join(m for ms in exc.message_dict.values() for m in ms))
        return None
    JobRun.objects.create(job=job, instance=instance, started_at=now)
    kind = EventKind.RESUME if runs else EventKind.START
    waited = int((now - job.waiting_since).total_seconds())
    job.state, job.instance, job.wait_note = JobState.RUNNING, instance, ""
    job.save(update_fields=["state", "instance", "wait_note"])
    what = "idle capacity" if job.priority == Priority.LOW else "on-demand capacity"
    record_job_event(job, kind, now, f"on {instance.host.name} in {what} after waiting {wait_text(waited)}", instance)
    record_event(actor="system", action=f"job.{kind}", target=job, team=job.team_id,
                 details={"instance": instance.pk, "host": instance.host.name, "waited_s": waited,
                          "pricing_model": job.pricing_model})
    return job
