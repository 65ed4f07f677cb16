"""The job queue's verbs: submit, cancel, and the scheduler's pass (``run_queue``).

A job runs as an instance launched through ``instances.services``: a low-priority job
under the ``idle`` pricing model (billed at the idle-capacity price, preemptible), a
normal one on-demand. Low-priority instances get the same preemption notice as spot
when a paying launch needs their GPUs (``instances.preemption.reclaim_spot_capacity``);
the scheduler then puts the job back at the head of the queue and resumes it, as a new
run, once idle capacity frees. Every change writes a ``JobEvent`` and an audit event in
the same transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Min, Sum
from django.utils import timezone

from audit.services import record_event
from console.validators import plain_name
from instances import catalog, images
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
from network import services as network_services

from .models import (
    MAX_COMMAND_CHARS,
    PRIORITY_RANK,
    EventKind,
    Job,
    JobEvent,
    JobRun,
    JobState,
    Priority,
)


class JobConflict(instance_transitions.LifecycleError):
    """A request the job's state does not allow (answers 409)."""

    code = "invalid_job_state"


def reclaim_hold() -> timedelta:
    """How long after a preemption notice a host's freed GPUs are left to the paying
    launch that asked for them, before low-priority jobs may use them again."""
    return timedelta(seconds=getattr(settings, "JOBS_RECLAIM_HOLD_SECONDS", 600))


# --- submit and cancel ---------------------------------------------------------------


def _check(*, name: str, command, gpu_model: GpuModel, gpu_count, priority: str, deadline, now: datetime) -> str:
    errors = {}
    try:
        plain_name(name)
    except ValidationError as exc:
        errors["name"] = exc.messages
    if not isinstance(command, str) or not command.strip():
        errors["command"] = "Give the command to run."
    elif len(command) > MAX_COMMAND_CHARS:
        errors["command"] = f"A command is at most {MAX_COMMAND_CHARS} characters (this one is {len(command)})."
    elif "\x00" in command:
        errors["command"] = "A command may not contain NUL characters."
    if priority not in Priority.values:
        errors["priority"] = f"Priority is one of {', '.join(Priority.values)}, not {priority!r}."
    # A job's GPUs are all on one host, in one NVLink group where the host has groups.
    most, by_group = instance_placement.largest_pool(gpu_model)
    if type(gpu_count) is not int or gpu_count <= 0:
        errors["gpu_count"] = "gpu_count is a whole number of GPUs, at least 1."
    elif most == 0:
        errors["gpu_model"] = f"No host has {gpu_model.name} GPUs."
    elif gpu_count > most:
        where = "in one NVLink group" if by_group else "on one host"
        errors["gpu_count"] = f"At most {most} {gpu_model.name} GPUs fit {where}; you asked for {gpu_count}."
    if deadline is not None and deadline <= now:
        errors["deadline"] = "The deadline has already passed; give a time in the future (or none)."
    if errors:
        raise ValidationError(errors)
    return command.strip()


def _tail_key(now: datetime) -> int:
    return int(now.timestamp() * 1_000_000)


def _head_key() -> int:
    lowest = Job.objects.filter(state=JobState.QUEUED).aggregate(k=Min("queue_key"))["k"]
    return (lowest if lowest is not None else _tail_key(timezone.now())) - 1


@transaction.atomic
def submit_job(
    *, actor, team, name: str, command: str, gpu_model: GpuModel, gpu_count: int, priority: str = Priority.LOW,
    deadline: datetime | None = None, image=None, subnet=None, security_groups=None, now: datetime | None = None,
) -> Job:
    """Queue a job; the scheduler starts it when capacity is idle. Each run's instance
    gets an address in ``subnet`` and ``security_groups`` (the team's defaults where
    not named), checked here as a launch's are."""
    now = now or timezone.now()
    command = _check(name=name, command=command, gpu_model=gpu_model, gpu_count=gpu_count, priority=priority,
                     deadline=deadline, now=now)
    network = network_services.check_choice(team=team, subnet=subnet, groups=security_groups)
    image = images.image_for_launch(image=image, team=team, gpu_model=gpu_model)
    pricing_model = PricingModel.IDLE if priority == Priority.LOW else PricingModel.ON_DEMAND
    why = catalog.missing_price(sku=gpu_model.name, pricing_model=pricing_model, at=now)
    if why:
        raise instance_lifecycle.NoPriceError(why)
    job = Job.objects.create(
        team=team, name=name, command=command, gpu_model=gpu_model, gpu_count=gpu_count, priority=priority,
        deadline=deadline, queue_key=_tail_key(now), submitted_at=now, waiting_since=now,
        created_by=actor if getattr(actor, "is_authenticated", False) else None, image=image, network=network,
    )
    _event(job, EventKind.SUBMIT, now, f"{gpu_count} × {gpu_model.name}, {job.get_priority_display().lower()}")
    record_event(actor=actor, action="job.submit", target=job, team=team, details={
        "name": name, "gpu_model": gpu_model.name, "gpu_count": gpu_count, "priority": priority,
        "deadline": deadline, "image": None if image is None else {"id": image.pk, "name": image.name},
        "network": network_services.describe_choice(network),
    })
    kick()
    return job


@transaction.atomic
def cancel_job(*, actor, job: Job, now: datetime | None = None) -> Job:
    """Take a queued job off the queue, or end a running one (its instance is terminated)."""
    now = now or timezone.now()
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.state not in (JobState.QUEUED, JobState.RUNNING):
        raise JobConflict(f"Job {job.name} is {job.get_state_display().lower()}; only a queued or running job can be cancelled.")
    was = job.state
    if was == JobState.RUNNING:
        instance = job.instance
        if instance is not None and instance.can_move_to(State.TERMINATED):
            instance_lifecycle.terminate_instance(actor=actor, instance=instance, at=now)
        _close_run(job, now, "cancelled")
    job.state, job.ended_at, job.wait_note = JobState.CANCELLED, now, ""
    job.save(update_fields=["state", "ended_at", "wait_note"])
    _event(job, EventKind.CANCEL, now, f"cancelled while {was}", job.instance if was == JobState.RUNNING else None)
    record_event(actor=actor, action="job.cancel", target=job, team=job.team_id, details={"was": was})
    return job


def _event(job: Job, kind: str, at: datetime, reason: str = "", instance: Instance | None = None) -> JobEvent:
    return JobEvent.objects.create(job=job, kind=kind, time=at, reason=reason[:300], instance=instance)


def _close_run(job: Job, at: datetime, reason: str) -> None:
    JobRun.objects.filter(job=job, ended_at__isnull=True).update(ended_at=at, end_reason=reason[:200])


def kick() -> None:
    """Run the scheduler once this transaction commits (a job was queued, or GPUs freed).
    Not while history is written at a past moment (``recorded_at``): a pass then would
    run at today's time in the middle of that history; the writer runs its own passes."""
    from audit.context import recorded_time

    from . import tasks

    if recorded_time() is not None:
        return
    transaction.on_commit(lambda: tasks.run_queue.delay())


# --- the scheduler --------------------------------------------------------------------


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
    _close_run(job, instance.state_changed_at, f"instance {instance.state}")
    job.state, job.ended_at = JobState.FINISHED, instance.state_changed_at
    job.save(update_fields=["state", "ended_at"])
    _event(job, EventKind.FINISH, instance.state_changed_at, f"its instance {instance.name} was {instance.state}", instance)
    record_event(actor="system", action="job.finish", target=job, team=job.team_id,
                 details={"instance": instance.pk, "instance_state": instance.state})
    return job


def _requeue(job: Job, instance: Instance, now: datetime) -> Job:
    at = instance.state_changed_at
    notice = PreemptionNotice.objects.filter(instance=instance).order_by("-notice_at").first()
    why = notice.reason if notice is not None else "capacity reclaimed"
    _close_run(job, at, f"preempted: {why}")
    job.state, job.queue_key = JobState.QUEUED, _head_key()
    job.preempted_at, job.waiting_since, job.preempt_reason, job.wait_note = at, at, why[:200], ""
    job.save(update_fields=["state", "queue_key", "preempted_at", "waiting_since", "preempt_reason", "wait_note"])
    _event(job, EventKind.PREEMPT, at, f"preempted by a paying launch ({why}); back at the head of the queue", instance)
    record_event(actor="system", action="job.preempt", target=job, team=job.team_id,
                 details={"instance": instance.pk, "reason": why, "requeued": "head"})
    return job


def _retry(job: Job, instance: Instance) -> Job:
    """Its instance never started (the host did not confirm the boot): the job did not
    run, so it goes back to the head of the queue and its next run is a new instance."""
    at = instance.state_changed_at
    why = instance.events.filter(to_state=State.FAILED).values_list("reason", flat=True).last() or "failed to start"
    _close_run(job, at, f"instance failed: {why}")
    job.state, job.queue_key, job.waiting_since, job.wait_note = JobState.QUEUED, _head_key(), at, ""
    job.save(update_fields=["state", "queue_key", "waiting_since", "wait_note"])
    _event(job, EventKind.RETRY, at, f"its instance {instance.name} failed to start ({why}); back at the head of the "
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
    _event(job, EventKind.EXPIRE, now, f"still queued at its deadline {job.deadline:%Y-%m-%d %H:%M} UTC; not started")
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
        with network_services.launching_on(actor="system", team=job.team, choice=job.network):
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
    _event(job, kind, now, f"on {instance.host.name} in {what} after waiting {wait_text(waited)}", instance)
    record_event(actor="system", action=f"job.{kind}", target=job, team=job.team_id,
                 details={"instance": instance.pk, "host": instance.host.name, "waited_s": waited,
                          "pricing_model": job.pricing_model})
    return job


# --- what the queue page and the API show ----------------------------------------------


@dataclass(frozen=True)
class QueueInfo:
    """A job's place in the queue (``position`` 1 = next for its GPU model; None when not
    queued), how long it has waited, why, and what it has cost."""

    position: int | None
    ahead: int
    waiting_seconds: int | None
    reason: str
    cost: Decimal
    price_per_hour: Decimal | None

    @property
    def waited(self) -> str:
        return "" if self.waiting_seconds is None else wait_text(self.waiting_seconds)


def wait_text(s: int) -> str:
    """A wait as people read it: 45 s, 12 min, 3 h 05 min, 2 d 4 h."""
    if s < 60:
        return f"{max(s, 0)} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def queue_info(jobs: list[Job], now: datetime | None = None) -> dict[int, QueueInfo]:
    """{job id: its QueueInfo} for the given jobs, in a few queries. Positions count
    every team's queued jobs of the same GPU model (names of others' jobs are never shown)."""
    now = now or timezone.now()
    models = {j.gpu_model_id for j in jobs if j.state == JobState.QUEUED}
    order: dict[int, list[int]] = {}
    for pk, model_id, _priority, _key in sorted(
        Job.objects.filter(state=JobState.QUEUED, gpu_model_id__in=models).values_list(
            "pk", "gpu_model_id", "priority", "queue_key"),
        key=lambda r: (PRIORITY_RANK[r[2]], r[3], r[0]),
    ):
        order.setdefault(model_id, []).append(pk)
    costs = job_costs([j.pk for j in jobs])
    prices: dict[tuple, Decimal | None] = {}
    out = {}
    for job in jobs:
        line = order.get(job.gpu_model_id, [])
        queued = job.state == JobState.QUEUED and job.pk in line
        ahead = line.index(job.pk) if queued else 0
        out[job.pk] = QueueInfo(
            position=ahead + 1 if queued else None,
            ahead=ahead,
            waiting_seconds=int((now - job.waiting_since).total_seconds()) if job.state == JobState.QUEUED else None,
            reason=why_waiting(job, ahead),
            cost=costs.get(job.pk, Decimal("0.00")),
            price_per_hour=_price(job, now, prices),
        )
    return out


def why_waiting(job: Job, ahead: int) -> str:
    """Why a job is not running, in one sentence or two ('' when it runs or ran)."""
    if job.state == JobState.EXPIRED:
        return f"Deadline passed at {job.deadline:%Y-%m-%d %H:%M} UTC before it could start."
    if job.state != JobState.QUEUED:
        return ""
    parts = []
    if job.preempted_at is not None and job.waiting_since == job.preempted_at:
        parts.append(f"Preempted at {job.preempted_at:%Y-%m-%d %H:%M:%S} UTC by a paying launch "
                     f"({job.preempt_reason}); it resumes when capacity frees.")
    if ahead:
        parts.append(f"Behind {ahead} job{'s' if ahead != 1 else ''} for {job.gpu_model.name}.")
    elif job.wait_note:
        parts.append(job.wait_note)
    elif not parts:
        parts.append("Waiting for the scheduler's next pass.")
    return " ".join(parts)


def job_costs(job_ids: list[int]) -> dict[int, Decimal]:
    """{job id: what its runs have cost so far}: the metered charges of its instances."""
    from billing.models import Charge
    from billing.pricing import from_cents

    rows = (
        Charge.objects.filter(instance__job_run__job_id__in=job_ids)
        .values("instance__job_run__job_id").annotate(c=Sum("billed_cents"))
        .values_list("instance__job_run__job_id", "c")
    )
    return {job_id: from_cents(c) for job_id, c in rows}


def _price(job: Job, now: datetime, seen: dict) -> Decimal | None:
    """What the job costs per hour while it runs (the price book's quote)."""
    key = (job.gpu_model.name, job.pricing_model, job.gpu_count)
    if key not in seen:
        quote = catalog.quote(sku=key[0], pricing_model=key[1], count=key[2], team_id=job.team_id, at=now)
        seen[key] = None if quote is None else quote.price_per_hour
    return seen[key]
