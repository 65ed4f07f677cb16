"""Submitting and cancelling jobs, and the records every change of a job writes (its
``JobEvent``, the end of its run); ``kick`` asks for a pass of the queue once a change
commits."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from audit.recording import record_event
from console.request_context import recorded_time
from console.validators import plain_name
from instances import catalog, images
from instances import lifecycle as instance_lifecycle
from instances import placement as instance_placement
from instances import transitions as instance_transitions
from instances.models import (
    GpuModel,
    Instance,
    PricingModel,
    State,
)
from network import interfaces as network_interfaces

from .models import (
    MAX_COMMAND_CHARS,
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


def head_key() -> int:
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
    network = network_interfaces.check_choice(team=team, subnet=subnet, groups=security_groups)
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
    record_job_event(job, EventKind.SUBMIT, now, f"{gpu_count} × {gpu_model.name}, {job.get_priority_display().lower()}")
    record_event(actor=actor, action="job.submit", target=job, team=team, details={
        "name": name, "gpu_model": gpu_model.name, "gpu_count": gpu_count, "priority": priority,
        "deadline": deadline, "image": None if image is None else {"id": image.pk, "name": image.name},
        "network": network_interfaces.describe_choice(network),
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
        close_run(job, now, "cancelled")
    job.state, job.ended_at, job.wait_note = JobState.CANCELLED, now, ""
    job.save(update_fields=["state", "ended_at", "wait_note"])
    record_job_event(job, EventKind.CANCEL, now, f"cancelled while {was}", job.instance if was == JobState.RUNNING else None)
    record_event(actor=actor, action="job.cancel", target=job, team=job.team_id, details={"was": was})
    return job


def record_job_event(job: Job, kind: str, at: datetime, reason: str = "", instance: Instance | None = None) -> JobEvent:
    return JobEvent.objects.create(job=job, kind=kind, time=at, reason=reason[:300], instance=instance)


def close_run(job: Job, at: datetime, reason: str) -> None:
    JobRun.objects.filter(job=job, ended_at__isnull=True).update(ended_at=at, end_reason=reason[:200])


# The pass is a task, and the task runs the scheduler, which writes through this module:
# JobsConfig.ready registers it here instead of this module importing it.
_queue_pass: Callable[[], object] = lambda: None  # noqa: E731


def run_passes_with(run: Callable[[], object]) -> None:
    """``run()`` queues one pass of the scheduler."""
    global _queue_pass
    _queue_pass = run


def kick() -> None:
    """Run the scheduler once this transaction commits (a job was queued, or GPUs freed).
    Not while history is written at a past moment (``recorded_at``): a pass then would
    run at today's time in the middle of that history; the writer runs its own passes."""
    if recorded_time() is not None:
        return
    transaction.on_commit(lambda: _queue_pass())
