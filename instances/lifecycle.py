"""The lifecycle verbs people and the platform call: launch, run, start, stop,
terminate, fail, force-stop, and the precision an instance declares. Each goes through
``transitions.transition``."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event

from . import catalog, images
from .models import (
    PREEMPTIBLE,
    GpuModel,
    Host,
    Image,
    Instance,
    LifecycleEvent,
    Precision,
    PrecisionPeriod,
    PrecisionSource,
    PricingModel,
    Region,
    SliceProfile,
    State,
)
from .placement import MAX_GPUS_PER_INSTANCE, PlacementError, hold_gpus, place, release_gpus
from .preemption import check_max_price, reclaim_spot_capacity
from .transitions import LifecycleError, change_time, locked, pending_limit, transition


class NoPriceError(LifecycleError):
    """The SKU has no price in effect: nothing is launched until an operator prices it."""

    code = "no_price"


MAX_LABELS = 20
_LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,62}$")


def check_labels(labels) -> dict[str, str]:
    """Labels: up to 20 {key: value} strings; keys like ``cost-centre`` (letters,
    digits, ``_.:/-``, at most 63), values at most 255 characters."""
    if not isinstance(labels, dict):
        raise ValidationError({"labels": "Labels are an object of {key: value} strings."})
    if len(labels) > MAX_LABELS:
        raise ValidationError({"labels": f"At most {MAX_LABELS} labels."})
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise ValidationError({"labels": f"{key!r} is not a label key (letters, digits, _.:/-, at most 63)."})
        if not isinstance(value, str) or len(value) > 255 or "\x00" in value:
            raise ValidationError({"labels": f"The value of {key!r} must be a string of at most 255 characters."})
    return dict(labels)


# A spot max price above this many times the on-demand price is a typo, not a ceiling.


def _require_price(gpu_model: GpuModel, slice_profile: SliceProfile | None, pricing_model: str, at: datetime) -> None:
    sku = slice_profile.sku if slice_profile is not None else gpu_model.name
    why = catalog.missing_price(sku=sku, pricing_model=pricing_model, at=at)
    if why:
        raise NoPriceError(why)


# Provisioning a launch and finishing a stop run in the background once the change
# commits. The tasks that run them call these verbs, so they register themselves here
# (InstancesConfig.ready) rather than being imported.
_background: dict[str, Callable[[int], object]] = {}


def run_in_background(step: str, run: Callable[[int], object]) -> None:
    """``run(instance id)`` does ``step`` ("provision" or "finish_stop") later."""
    _background[step] = run


def _after_commit(step: str, instance: Instance) -> None:
    run = _background[step]
    transaction.on_commit(lambda: run(instance.pk))


def launch_instance(*, actor, team, name: str, gpu_model: GpuModel, gpu_count: int, pricing_model: str, **options) -> Instance:
    """Place and launch an instance. When on-demand or reserved capacity is short and
    running spot instances (or low-priority jobs) hold the room, those get a preemption notice (default 2
    minutes) and the launch fails with a reason saying when to retry."""
    try:
        return _launch(
            actor=actor, team=team, name=name, gpu_model=gpu_model, gpu_count=gpu_count,
            pricing_model=pricing_model, **options,
        )
    except PlacementError as exc:
        if pricing_model in PREEMPTIBLE or options.get("slice_profile") is not None:
            raise
        noticed = reclaim_spot_capacity(gpu_model=gpu_model, count=gpu_count, region=options.get("region"))
        if not noticed:
            raise
        names = ", ".join(i.name for i in noticed)
        kind = "Spot instances" if all(i.pricing_model == PricingModel.SPOT for i in noticed) else "Preemptible instances"
        raise PlacementError(
            f"{exc} {kind} {names} on {noticed[0].host.name} were given notice to make room; "
            "launch again once they are preempted."
        ) from None


@transaction.atomic
def _launch(
    *,
    actor,
    team,
    name: str,
    gpu_model: GpuModel,
    gpu_count: int,
    pricing_model: str,
    slice_profile: SliceProfile | None = None,
    region: Region | None = None,
    host: Host | None = None,
    at: datetime | None = None,
    provision: bool = True,
    labels: dict | None = None,
    image: Image | None = None,
    max_price=None,
) -> Instance:
    labels = check_labels(labels or {})
    if pricing_model not in PricingModel.values:
        raise LifecycleError(f"Unknown pricing model {pricing_model!r}.")
    if not 1 <= gpu_count <= MAX_GPUS_PER_INSTANCE:
        raise LifecycleError(f"gpu_count must be between 1 and {MAX_GPUS_PER_INSTANCE}.")
    at = at or timezone.now()
    _require_price(gpu_model, slice_profile, pricing_model, at)
    image = images.image_for_launch(image=image, team=team, gpu_model=gpu_model)
    sku = slice_profile.sku if slice_profile is not None else gpu_model.name
    max_price = check_max_price(max_price, pricing_model=pricing_model, sku=sku, at=at)
    GpuModel.objects.select_for_update().get(pk=gpu_model.pk)  # serialises placement per model
    placement = place(gpu_model=gpu_model, count=gpu_count, slice_profile=slice_profile, region=region, host=host)
    instance = Instance.objects.create(
        team=team,
        name=name,
        gpu_model=gpu_model,
        slice_profile=slice_profile,
        gpu_count=gpu_count,
        pricing_model=pricing_model,
        state=State.PENDING,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
        created_at=at,
        state_changed_at=at,
        labels=labels,
        image=image,
        max_price=max_price,
    )
    hold_gpus(instance, placement, at)
    instance.save(update_fields=["host"])
    LifecycleEvent.objects.create(
        instance=instance, time=at, from_state="", to_state=State.PENDING, gpu_count=gpu_count, host=placement.host
    )
    record_event(
        actor=actor,
        action="instance.launch",
        target=instance,
        team=team,
        details={
            "name": name,
            "sku": instance.sku,
            "gpu_count": gpu_count,
            "pricing_model": pricing_model,
            "host": placement.host.name,
            "labels": labels,
            "image": None if image is None else {"id": image.pk, "name": image.name, "reference": image.reference},
            "max_price": None if max_price is None else str(max_price),
        },
    )
    if provision:
        _after_commit("provision", instance)
    return instance


@transaction.atomic
def mark_running(*, actor="system", instance: Instance, at: datetime | None = None) -> Instance:
    return transition(locked(instance), State.RUNNING, actor=actor, action="instance.running", at=at)


@transaction.atomic
def start_instance(
    *, actor, instance: Instance, at: datetime | None = None, provision: bool = True
) -> Instance:
    instance = locked(instance)
    if not instance.can_move_to(State.PENDING):
        raise LifecycleError(f"Instance {instance.name} is {instance.state}; only a stopped instance can start.")
    _require_price(instance.gpu_model, instance.slice_profile, instance.pricing_model, at or timezone.now())
    GpuModel.objects.select_for_update().get(pk=instance.gpu_model_id)
    placement = place(
        gpu_model=instance.gpu_model, count=instance.gpu_count, slice_profile=instance.slice_profile
    )
    at = change_time(instance, at)
    hold_gpus(instance, placement, at)
    transition(instance, State.PENDING, actor=actor, action="instance.start", at=at)
    if provision:
        _after_commit("provision", instance)
    return instance


@transaction.atomic
def stop_instance(*, actor, instance: Instance, at: datetime | None = None, finish: bool = True) -> Instance:
    instance = locked(instance)
    at = change_time(instance, at)
    if instance.state == State.PENDING:
        release_gpus(instance, at)
        return transition(instance, State.STOPPED, actor=actor, action="instance.stop", at=at)
    transition(instance, State.STOPPING, actor=actor, action="instance.stop", at=at)
    if finish:
        _after_commit("finish_stop", instance)
    return instance


@transaction.atomic
def finish_stop(*, actor="system", instance: Instance, at: datetime | None = None) -> Instance:
    instance = locked(instance)
    at = change_time(instance, at)
    release_gpus(instance, at)
    return transition(instance, State.STOPPED, actor=actor, action="instance.stopped", at=at)


@transaction.atomic
def terminate_instance(*, actor, instance: Instance, at: datetime | None = None) -> Instance:
    instance = locked(instance)
    if instance.state == State.TERMINATED:
        raise LifecycleError(f"Instance {instance.name} is already terminated.")
    at = change_time(instance, at)
    release_gpus(instance, at)
    return transition(instance, State.TERMINATED, actor=actor, action="instance.terminate", at=at)


@transaction.atomic
def fail_instance(*, actor="system", instance: Instance, reason: str, at: datetime | None = None) -> Instance:
    """A pending instance whose host could not boot it: its GPUs are given back and it is
    never billed. ``failed`` is final."""
    instance = locked(instance)
    if instance.state != State.PENDING:
        raise LifecycleError(f"Instance {instance.name} is {instance.state}; only a pending instance can fail to start.")
    at = change_time(instance, at)
    release_gpus(instance, at)
    return transition(instance, State.FAILED, actor=actor, action="instance.fail", reason=reason, by_platform=True,
                       at=at)


def fail_overdue(*, now: datetime | None = None) -> list[Instance]:
    """Fail each instance pending longer than PENDING_FAIL_SECONDS (its host never
    confirmed the boot), giving its GPUs back. Each is its own transaction."""
    now = now or timezone.now()
    failed = []
    due = Instance.objects.filter(state=State.PENDING, state_changed_at__lte=now - pending_limit()).order_by("pk")
    for instance in due:
        waited = int((now - instance.state_changed_at).total_seconds() // 60)
        try:
            failed.append(fail_instance(instance=instance, at=now,
                                        reason=f"the host did not confirm the boot within {waited} minutes"))
        except LifecycleError:
            continue  # it ran or ended meanwhile
    return failed


@transaction.atomic
def force_stop(*, actor, instance: Instance, at: datetime | None = None) -> Instance:
    """Operators end a ``stopping`` that never finished (the host never confirmed): the
    GPUs are released now. Billing already stopped at the grace."""
    instance = locked(instance)
    if instance.state != State.STOPPING:
        raise LifecycleError(f"Instance {instance.name} is {instance.state}; only a stopping instance can be forced.")
    at = change_time(instance, at)
    stuck_for = int((at - instance.state_changed_at).total_seconds())
    release_gpus(instance, at)
    return transition(instance, State.STOPPED, actor=actor, action="instance.force_stop", at=at,
                       reason=f"forced by an operator after {stuck_for} s in stopping", details={"stuck_s": stuck_for})


@transaction.atomic
def set_precision(
    *, actor, instance: Instance, precision: str, source: str = PrecisionSource.TEAM, at: datetime | None = None
) -> Instance:
    """The number format the instance's achieved-TFLOP/s estimate assumes from ``at`` on
    (``source``: the team set it, or the workload declared it). The period in force ends
    there; the past keeps the precision of its time. The same precision from the same
    source changes nothing."""
    if precision not in Precision.values:
        raise LifecycleError(f"Unknown precision {precision!r}; choose one of {', '.join(Precision.values)}.")
    if source not in PrecisionSource.values:
        raise LifecycleError(f"Unknown precision source {source!r}; choose one of {', '.join(PrecisionSource.values)}.")
    instance = locked(instance)
    at = at or timezone.now()
    current = PrecisionPeriod.objects.select_for_update().filter(instance=instance, end__isnull=True).last()
    if current is None:
        first = PrecisionSource.DEFAULT if instance.precision == Precision.BF16 else PrecisionSource.TEAM
        current = PrecisionPeriod(instance=instance, team_id=instance.team_id, precision=instance.precision,
                                  source=first, start=instance.created_at)
    elif (current.precision, current.source) == (precision, source):
        return instance
    if at <= current.start:
        raise LifecycleError(f"The precision in force began at {current.start:%Y-%m-%d %H:%M:%S} UTC; "
                             "a change must come after it.")
    current.end = at
    current.save()
    PrecisionPeriod.objects.create(instance=instance, team_id=instance.team_id, precision=precision, source=source,
                                   start=at)
    before = instance.precision
    instance.precision = precision
    instance.save(update_fields=["precision"])
    record_event(actor=actor, action="instance.precision", target=instance, team=instance.team_id,
                 details={"from": before, "to": precision, "source": source})
    return instance
