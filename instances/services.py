"""Instance lifecycle and placement. Every state change goes through one of these verbs;
each writes its lifecycle event and audit event in the same transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from audit.models import Outcome
from audit.services import record_event
from console.errors import Conflict
from console.validators import ascii_decimal

from . import catalog, images
from .models import (
    FINAL_STATES,
    HOLDING_STATES,
    PREEMPTIBLE,
    Gpu,
    GpuHold,
    GpuModel,
    GpuSlice,
    Host,
    HostKind,
    HostState,
    Image,
    Instance,
    LifecycleEvent,
    NoticeStatus,
    Precision,
    PrecisionPeriod,
    PrecisionSource,
    PreemptionNotice,
    PricingModel,
    Region,
    SliceProfile,
    State,
    gpu_free_q,
)

MAX_GPUS_PER_INSTANCE = 16


class LifecycleError(Conflict):
    """A request the instance's state does not allow (answers 409)."""

    code = "invalid_transition"


class PlacementError(LifecycleError):
    """No host can hold the request now (answers 409 with the reason)."""

    code = "no_capacity"


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
MAX_PRICE_CEILING = 100
_MAX_PRICE_LIMIT = Decimal("100000000")  # what the column holds, where no on-demand price is known


def price_text(value: Decimal) -> str:
    """A price per hour as people read it: its own decimals, at least 2 (0.40, 1.794)."""
    whole, _, frac = f"{value.normalize():f}".partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def check_max_price(value, *, pricing_model: str, sku: str, at: datetime) -> Decimal | None:
    """A spot launch's ceiling per GPU-hour, as Decimal, or a ValidationError on ``max_price``."""
    if value is None or value == "":
        return None
    if pricing_model != PricingModel.SPOT:
        raise ValidationError({"max_price": "A max price applies to spot launches only."})
    try:
        price = ascii_decimal(value)
    except (InvalidOperation, ValueError):
        raise ValidationError({"max_price": f"{str(value)[:40]!r} is not a price per GPU-hour."}) from None
    if not price.is_finite():
        raise ValidationError({"max_price": "The max price is a finite number."})
    if price <= 0:
        raise ValidationError({"max_price": "The max price is more than zero."})
    price = price.quantize(Decimal("0.000001"), rounding=ROUND_DOWN)
    if price <= 0:
        raise ValidationError({"max_price": "The max price is at least 0.000001 per GPU-hour."})
    listed = getattr(catalog.quote(sku=sku, pricing_model=PricingModel.ON_DEMAND, count=1, team_id=None, at=at),
                     "per_gpu_hour", None)
    if listed is not None and price > listed * MAX_PRICE_CEILING:
        raise ValidationError({"max_price": f"{price_text(price)} per GPU-hour is more than {MAX_PRICE_CEILING} "
                                            f"times the on-demand price ({price_text(listed)}); give a real ceiling."})
    if price >= _MAX_PRICE_LIMIT:
        raise ValidationError({"max_price": f"The max price is below {_MAX_PRICE_LIMIT} per GPU-hour."})
    spot = getattr(catalog.quote(sku=sku, pricing_model=PricingModel.SPOT, count=1, team_id=None, at=at),
                   "per_gpu_hour", None)
    if spot is not None and spot > price:
        raise ValidationError({"max_price": f"The spot price now ({price_text(spot)} per GPU-hour) is above "
                                            f"{price_text(price)}; the instance would be preempted at once."})
    return price


def stopping_grace() -> timedelta:
    """How long ``stopping`` may last before it is flagged as stuck; billing stops here."""
    return timedelta(seconds=getattr(settings, "STOPPING_GRACE_SECONDS", 600))


def pending_grace() -> timedelta:
    """How long ``pending`` (placed, booting, not billed) may last before it is flagged as stuck."""
    return timedelta(seconds=getattr(settings, "PENDING_GRACE_SECONDS", 600))


def pending_limit() -> timedelta:
    """How long ``pending`` may last at all: past it the instance fails (``fail_overdue``)."""
    return timedelta(seconds=getattr(settings, "PENDING_FAIL_SECONDS", 1800))


def is_stuck(instance: Instance, now: datetime | None = None) -> bool:
    """Stopping past the stopping grace, or pending past the pending grace."""
    grace = {State.STOPPING: stopping_grace(), State.PENDING: pending_grace()}.get(instance.state)
    return grace is not None and (now or timezone.now()) - instance.state_changed_at > grace


def state_note(instance: Instance, now: datetime | None = None) -> str:
    """Why an instance that holds GPUs without running is where it is, in words ('' otherwise)."""
    if instance.state not in (State.PENDING, State.STOPPING):
        return ""
    now = now or timezone.now()
    since = f"since {instance.state_changed_at:%Y-%m-%d %H:%M} UTC"
    where = f" on {instance.host.name}" if instance.host_id else ""
    if instance.state == State.PENDING:
        text = (f"Placed{where} and booting {since}: its GPUs are held for it, and it is not billed until the host "
                "reports it running.")
        if is_stuck(instance, now):
            fails = instance.state_changed_at + pending_limit()
            text += (f" Stuck: the host has not confirmed the boot within {int(pending_grace().total_seconds() // 60)}"
                     f" minutes; terminate it to give the GPUs back, or it fails at {fails:%Y-%m-%d %H:%M} UTC.")
        return text
    if instance.state == State.STOPPING:
        text = f"Stopping{where} {since}: waiting for the host to confirm."
        if is_stuck(instance, now):
            text += (f" Stuck: not confirmed within {int(stopping_grace().total_seconds() // 60)} minutes; "
                     "billing stopped at the grace.")
        return text
    return ""


def _require_price(gpu_model: GpuModel, slice_profile: SliceProfile | None, pricing_model: str, at: datetime) -> None:
    sku = slice_profile.sku if slice_profile is not None else gpu_model.name
    why = catalog.missing_price(sku=sku, pricing_model=pricing_model, at=at)
    if why:
        raise NoPriceError(why)


@dataclass(frozen=True)
class Placement:
    host: Host
    gpus: list[Gpu]
    slices: list[GpuSlice]


def _free_whole_gpus(model: GpuModel):
    return Gpu.objects.filter(gpu_free_q(), model=model)


def place(
    *,
    gpu_model: GpuModel,
    count: int,
    slice_profile: SliceProfile | None = None,
    region: Region | None = None,
    host: Host | None = None,
) -> Placement:
    """All of an instance's GPUs (or slices) on one host; the fullest host that fits wins,
    so whole hosts stay free for large jobs. Callers hold the model's row lock."""
    if slice_profile is not None:
        free = GpuSlice.objects.filter(
            profile=slice_profile, instance__isnull=True, gpu__host__state=HostState.ACTIVE, gpu__instance__isnull=True,
            gpu__cordoned_at__isnull=True, gpu__host__cordoned_at__isnull=True,
        ).select_related("gpu__host")
        if region is not None:
            free = free.filter(gpu__host__region=region)
        if host is not None:
            free = free.filter(gpu__host=host)
        by_host: dict[int, list[GpuSlice]] = {}
        for s in free.order_by("gpu__host__name", "gpu__index", "gpu_instance_id"):
            by_host.setdefault(s.gpu.host_id, []).append(s)
        fits = [slices for slices in by_host.values() if len(slices) >= count]
        if not fits:
            most = max((len(v) for v in by_host.values()), default=0)
            raise PlacementError(
                f"No capacity: no active host has {count} free {slice_profile.name} "
                f"{slice_profile.get_kind_display()}s of {gpu_model.name} (most free on one host: {most})."
            )
        chosen = min(fits, key=len)[:count]
        return Placement(host=chosen[0].gpu.host, gpus=[], slices=chosen)

    free = _free_whole_gpus(gpu_model).select_related("host")
    if region is not None:
        free = free.filter(host__region=region)
    if host is not None:
        free = free.filter(host=host)
    free = list(free.order_by("host__name", "index"))
    pools = _nvlink_pools(free)
    fits = [gpus for gpus in pools.values() if len(gpus) >= count]
    if not fits:
        raise PlacementError(_no_room(gpu_model, count, free, pools, region))
    # The smallest pool that fits, so whole hosts and groups stay free for large jobs.
    chosen = min(fits, key=len)
    return Placement(host=chosen[0].host, gpus=chosen[:count], slices=[])


def nvlink_group(gpu: Gpu, grouped_hosts: set[int]) -> str:
    """The NVLink group a GPU is placed in: its own, else its host's. On a host that has
    groups, a GPU in none is a group of one; on a host without, all GPUs are one pool."""
    group = gpu.nvlink_group or gpu.host.nvlink_group
    if group:
        return group
    return f"gpu{gpu.pk}" if gpu.host_id in grouped_hosts else ""


def _grouped_hosts(host_ids) -> set[int]:
    """Hosts whose GPUs name NVLink groups of their own."""
    return set(Gpu.objects.filter(host_id__in=set(host_ids)).exclude(nvlink_group="")
               .values_list("host_id", flat=True).distinct())


def _nvlink_pools(gpus: list[Gpu]) -> dict[tuple[int, str], list[Gpu]]:
    """{(host, NVLink group): its GPUs}: the sets one instance may be placed in."""
    grouped = _grouped_hosts(g.host_id for g in gpus)
    pools: dict[tuple[int, str], list[Gpu]] = {}
    for g in gpus:
        pools.setdefault((g.host_id, nvlink_group(g, grouped)), []).append(g)
    return pools


def _no_room(gpu_model: GpuModel, count: int, free: list[Gpu], pools: dict, region: Region | None) -> str:
    per_host: dict[int, list[Gpu]] = {}
    for g in free:
        per_host.setdefault(g.host_id, []).append(g)
    most_host = max((len(v) for v in per_host.values()), default=0)
    most_pool = max((len(v) for v in pools.values()), default=0)
    where = f" in {region.name}" if region else ""
    if most_host < count:
        return (f"No capacity: no active host{where} has {count} free {gpu_model.name} GPUs "
                f"(most free on one host: {most_host}).")
    roomy = next(gpus[0].host for gpus in per_host.values() if len(gpus) >= count)
    return (f"No NVLink group can hold {count} {gpu_model.name} GPUs: an instance's GPUs must share one NVLink "
            f"group, and the most free in one group{where} is {most_pool} (host {roomy.name} has "
            f"{len(per_host[roomy.pk])} free, split across groups). Ask for at most {most_pool}, or try later.")


def largest_pool(gpu_model: GpuModel) -> tuple[int, bool]:
    """(the most GPUs of ``gpu_model`` one instance can ever get, whether NVLink groups
    smaller than a host set that limit), free or not."""
    gpus = list(Gpu.objects.filter(model=gpu_model, host__kind=HostKind.PASSTHROUGH).select_related("host"))
    per_host: dict[int, int] = {}
    for g in gpus:
        per_host[g.host_id] = per_host.get(g.host_id, 0) + 1
    pools = _nvlink_pools(gpus)
    most = max((len(v) for v in pools.values()), default=0)
    return most, most < max(per_host.values(), default=0)


def free_gpus_by_host(*, gpu_model: GpuModel) -> dict[int, int]:
    """{host id: the most free whole GPUs of ``gpu_model`` one instance can get there
    (one NVLink group)} on active passthrough hosts."""
    out: dict[int, int] = {}
    for (host_id, _group), gpus in _nvlink_pools(list(_free_whole_gpus(gpu_model).select_related("host"))).items():
        out[host_id] = max(out.get(host_id, 0), len(gpus))
    return out


def free_capacity(*, gpu_model: GpuModel, slice_profile: SliceProfile | None = None) -> tuple[int, int]:
    """(free now in all, most one instance can get now) of whole GPUs of ``gpu_model``
    or of ``slice_profile`` slices: an instance's GPUs are on one host, in one NVLink
    group where the host has groups."""
    if slice_profile is not None:
        rows = GpuSlice.objects.filter(
            profile=slice_profile, instance__isnull=True, gpu__host__state=HostState.ACTIVE, gpu__instance__isnull=True,
            gpu__cordoned_at__isnull=True, gpu__host__cordoned_at__isnull=True,
        ).values("gpu__host").annotate(n=Count("id")).values_list("n", flat=True)
        counts = list(rows)
    else:
        counts = [len(v) for v in _nvlink_pools(list(_free_whole_gpus(gpu_model).select_related("host"))).values()]
    return sum(counts), max(counts, default=0)


def _allocate(instance: Instance, placement: Placement, at: datetime) -> None:
    Gpu.objects.filter(pk__in=[g.pk for g in placement.gpus]).update(instance=instance, team=instance.team)
    GpuSlice.objects.filter(pk__in=[s.pk for s in placement.slices]).update(instance=instance, team=instance.team)
    GpuHold.objects.bulk_create(
        [GpuHold(gpu_id=g.pk, instance=instance, team_id=instance.team_id, start=at) for g in placement.gpus]
        + [GpuHold(gpu_id=s.gpu_id, slice_id=s.pk, instance=instance, team_id=instance.team_id, start=at)
           for s in placement.slices]
    )
    instance.host = placement.host


def _release(instance: Instance, at: datetime) -> None:
    Gpu.objects.filter(instance=instance).update(instance=None, team=None)
    GpuSlice.objects.filter(instance=instance).update(instance=None, team=None)
    GpuHold.objects.filter(instance=instance, end__isnull=True).update(end=at)


def _transition(
    instance: Instance,
    to_state: str,
    *,
    actor,
    action: str,
    reason: str = "",
    by_platform: bool = False,
    at: datetime | None = None,
    details: dict | None = None,
) -> Instance:
    if instance.state in FINAL_STATES:
        raise LifecycleError(f"Instance {instance.name} is {instance.state}, which is final; it cannot become {to_state}.")
    if not instance.can_move_to(to_state):
        raise LifecycleError(
            f"Instance {instance.name} is {instance.state}; it cannot become {to_state}."
        )
    at = _when(instance, at)
    # Metering reads the events in time order: one dated before the last would reorder
    # the instance's history (an end before its start bills it for ever).
    if at < instance.state_changed_at:
        raise LifecycleError(
            f"Instance {instance.name} became {instance.state} at {instance.state_changed_at:%Y-%m-%d %H:%M:%S} UTC; "
            f"a change to {to_state} cannot be dated before that ({at:%Y-%m-%d %H:%M:%S} UTC)."
        )
    from_state = instance.state
    instance.state = to_state
    instance.state_changed_at = at
    instance.save(update_fields=["state", "state_changed_at", "host"])
    LifecycleEvent.objects.create(
        instance=instance,
        time=at,
        from_state=from_state,
        to_state=to_state,
        gpu_count=instance.gpu_count,
        host=instance.host,
        reason=reason[:200],
        by_platform=by_platform,
    )
    record_event(
        actor=actor,
        action=action,
        target=instance,
        team=instance.team_id,
        details={"from": from_state, "to": to_state, "reason": reason, **(details or {})},
    )
    _announce(instance)
    return instance


def _when(instance: Instance, at: datetime | None) -> datetime:
    """``at`` as given; else now, or the instance's last change where this server's clock
    is behind the one that wrote it (a change never goes before the last)."""
    return at if at is not None else max(timezone.now(), instance.state_changed_at)


def _locked(instance: Instance) -> Instance:
    return Instance.objects.select_for_update().select_related("team", "gpu_model").get(pk=instance.pk)


def _after_commit_provision(instance: Instance) -> None:
    from . import tasks

    transaction.on_commit(lambda: tasks.provision_instance.delay(instance.pk))


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
def reclaim_spot_capacity(*, gpu_model: GpuModel, count: int, region: Region | None = None) -> list[Instance]:
    """Give notice to the fewest running preemptible instances (spot, and low-priority
    jobs in idle capacity, those first) in one NVLink group (one host where the host has
    no groups) whose GPUs, with the group's free ones, make room for ``count`` GPUs.
    Returns the instances given notice.

    Runs under the model's placement lock, and counts GPUs already under notice as room
    coming free: two launches short of capacity at once never both preempt for it."""
    GpuModel.objects.select_for_update().get(pk=gpu_model.pk)
    gpus = Gpu.objects.filter(model=gpu_model, host__state=HostState.ACTIVE, host__kind=HostKind.PASSTHROUGH)
    if region is not None:
        gpus = gpus.filter(host__region=region)
    pools = _nvlink_pools(list(gpus.select_related("host").order_by("host__name", "index")))
    held = {g.instance_id for pool in pools.values() for g in pool if g.instance_id}
    spot = {i.pk: i for i in Instance.objects.filter(
        pk__in=held, state=State.RUNNING, pricing_model__in=PREEMPTIBLE, slice_profile=None).select_related("host")}
    noticed = set(PreemptionNotice.objects.filter(instance__in=list(spot), status=NoticeStatus.PENDING)
                  .values_list("instance_id", flat=True))
    best: list[Instance] | None = None
    # Room is counted per NVLink group (a host without groups is one): freeing GPUs in
    # two groups never makes room for an instance that needs them in one.
    for pool in pools.values():
        holders: dict[int | None, int] = {}
        for g in pool:
            holders[g.instance_id] = holders.get(g.instance_id, 0) + 1
        room = holders.get(None, 0) + sum(n for pk, n in holders.items() if pk in noticed)
        if room >= count:
            return []  # room is already on its way: launching again once it frees will fit
        chosen = []
        for candidate in sorted((spot[pk] for pk in holders if pk in spot and pk not in noticed),
                                key=lambda i: (i.pricing_model != PricingModel.IDLE, -i.gpu_count, i.created_at)):
            if room >= count:
                break
            chosen.append(candidate)
            room += holders[candidate.pk]
        if room >= count and chosen and (best is None or len(chosen) < len(best)):
            best = chosen
    for instance in best or []:
        issue_preemption_notice(actor="system", instance=instance, reason=f"capacity needed for {count} × {gpu_model.name}")
    return best or []


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
    _allocate(instance, placement, at)
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
        _after_commit_provision(instance)
    return instance


@transaction.atomic
def mark_running(*, actor="system", instance: Instance, at: datetime | None = None) -> Instance:
    return _transition(_locked(instance), State.RUNNING, actor=actor, action="instance.running", at=at)


@transaction.atomic
def start_instance(
    *, actor, instance: Instance, at: datetime | None = None, provision: bool = True
) -> Instance:
    instance = _locked(instance)
    if not instance.can_move_to(State.PENDING):
        raise LifecycleError(f"Instance {instance.name} is {instance.state}; only a stopped instance can start.")
    _require_price(instance.gpu_model, instance.slice_profile, instance.pricing_model, at or timezone.now())
    GpuModel.objects.select_for_update().get(pk=instance.gpu_model_id)
    placement = place(
        gpu_model=instance.gpu_model, count=instance.gpu_count, slice_profile=instance.slice_profile
    )
    at = _when(instance, at)
    _allocate(instance, placement, at)
    _transition(instance, State.PENDING, actor=actor, action="instance.start", at=at)
    if provision:
        _after_commit_provision(instance)
    return instance


@transaction.atomic
def stop_instance(*, actor, instance: Instance, at: datetime | None = None, finish: bool = True) -> Instance:
    instance = _locked(instance)
    at = _when(instance, at)
    if instance.state == State.PENDING:
        _release(instance, at)
        return _transition(instance, State.STOPPED, actor=actor, action="instance.stop", at=at)
    _transition(instance, State.STOPPING, actor=actor, action="instance.stop", at=at)
    if finish:
        from . import tasks

        transaction.on_commit(lambda: tasks.finish_stop.delay(instance.pk))
    return instance


@transaction.atomic
def finish_stop(*, actor="system", instance: Instance, at: datetime | None = None) -> Instance:
    instance = _locked(instance)
    at = _when(instance, at)
    _release(instance, at)
    return _transition(instance, State.STOPPED, actor=actor, action="instance.stopped", at=at)


@transaction.atomic
def terminate_instance(*, actor, instance: Instance, at: datetime | None = None) -> Instance:
    instance = _locked(instance)
    if instance.state == State.TERMINATED:
        raise LifecycleError(f"Instance {instance.name} is already terminated.")
    at = _when(instance, at)
    _release(instance, at)
    return _transition(instance, State.TERMINATED, actor=actor, action="instance.terminate", at=at)


@transaction.atomic
def fail_instance(*, actor="system", instance: Instance, reason: str, at: datetime | None = None) -> Instance:
    """A pending instance whose host could not boot it: its GPUs are given back and it is
    never billed. ``failed`` is final."""
    instance = _locked(instance)
    if instance.state != State.PENDING:
        raise LifecycleError(f"Instance {instance.name} is {instance.state}; only a pending instance can fail to start.")
    at = _when(instance, at)
    _release(instance, at)
    return _transition(instance, State.FAILED, actor=actor, action="instance.fail", reason=reason, by_platform=True,
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
def preempt_instance(
    *, actor="system", instance: Instance, reason: str = "capacity reclaimed", at: datetime | None = None
) -> Instance:
    instance = _locked(instance)
    if instance.pricing_model not in PREEMPTIBLE:
        raise LifecycleError(f"Instance {instance.name} is {instance.get_pricing_model_display()}; only spot instances "
                             "and low-priority jobs are preempted.")
    at = _when(instance, at)
    _release(instance, at)
    return _transition(
        instance, State.PREEMPTED, actor=actor, action="instance.preempt", reason=reason, by_platform=True, at=at
    )


@transaction.atomic
def force_stop(*, actor, instance: Instance, at: datetime | None = None) -> Instance:
    """Operators end a ``stopping`` that never finished (the host never confirmed): the
    GPUs are released now. Billing already stopped at the grace."""
    instance = _locked(instance)
    if instance.state != State.STOPPING:
        raise LifecycleError(f"Instance {instance.name} is {instance.state}; only a stopping instance can be forced.")
    at = _when(instance, at)
    stuck_for = int((at - instance.state_changed_at).total_seconds())
    _release(instance, at)
    return _transition(instance, State.STOPPED, actor=actor, action="instance.force_stop", at=at,
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
    instance = _locked(instance)
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


def holding(instance: Instance) -> bool:
    return instance.state in HOLDING_STATES


# --- spot preemption -------------------------------------------------------------

DEFAULT_NOTICE = timedelta(minutes=2)


@transaction.atomic
def issue_preemption_notice(*, actor, instance: Instance, notice: timedelta = DEFAULT_NOTICE, reason: str = "",
                            now: datetime | None = None) -> PreemptionNotice:
    """Warn a spot instance's (or a low-priority job's) team that the platform takes it
    back at now + notice."""
    from console.live import publish_on_commit, team_group

    now = now or timezone.now()
    if not timedelta(0) <= notice <= timedelta(hours=1):
        raise ValidationError({"notice_seconds": "The notice is between 0 seconds and one hour."})
    instance = _locked(instance)
    if instance.pricing_model not in PREEMPTIBLE:
        raise LifecycleError(f"Instance {instance.name} is {instance.get_pricing_model_display()}; only spot instances "
                             "and low-priority jobs are preempted.")
    if instance.state != State.RUNNING:
        raise LifecycleError(f"Instance {instance.name} is {instance.state}; only a running instance can be preempted.")
    if PreemptionNotice.objects.filter(instance=instance, status=NoticeStatus.PENDING).exists():
        raise LifecycleError(f"Instance {instance.name} already has a pending preemption notice.")
    item = PreemptionNotice.objects.create(instance=instance, team_id=instance.team_id, notice_at=now,
                                           preempt_at=now + notice, reason=reason[:200] or "capacity needed",
                                           issued_by=actor if getattr(actor, "is_authenticated", False) else None)
    record_event(actor=actor, action="billing.preemption.notice", target=instance, team=instance.team_id,
                 details={"preempt_at": item.preempt_at, "reason": item.reason, "notice_s": int(notice.total_seconds())})
    publish_on_commit([team_group(instance.team_id)], "preemption", {
        "team": instance.team_id, "instance": instance.pk, "name": instance.name,
        "preempt_at": item.preempt_at.isoformat(), "seconds": int(notice.total_seconds()), "reason": item.reason,
    })
    return item


def spot_against_max(*, now: datetime | None = None) -> list[tuple[Instance, Decimal]]:
    """(instance, spot price in effect now) for each running spot instance with a max
    price; the alert rule on spot price against max price reads these too."""
    now = now or timezone.now()
    found, prices = [], {}
    candidates = (Instance.objects.filter(state=State.RUNNING, pricing_model=PricingModel.SPOT, max_price__isnull=False)
                  .select_related("gpu_model", "slice_profile__gpu_model").order_by("id"))
    for instance in candidates:
        if instance.sku not in prices:
            quote = catalog.quote(sku=instance.sku, pricing_model=PricingModel.SPOT, count=1, team_id=None, at=now)
            prices[instance.sku] = getattr(quote, "per_gpu_hour", None)
        if prices[instance.sku] is not None:
            found.append((instance, prices[instance.sku]))
    return found


def over_max_price(*, now: datetime | None = None) -> list[tuple[Instance, Decimal]]:
    """Those of ``spot_against_max`` the spot price went above, that have no notice yet."""
    pending = set(PreemptionNotice.objects.filter(status=NoticeStatus.PENDING).values_list("instance_id", flat=True))
    return [(i, spot) for i, spot in spot_against_max(now=now) if spot > i.max_price and i.pk not in pending]


def enforce_max_prices(*, now: datetime | None = None, notice: timedelta = DEFAULT_NOTICE) -> list[PreemptionNotice]:
    """Give the preemption notice to each spot instance the spot price went above the max
    price of. Each is its own transaction: one that cannot be noticed does not stop the rest."""
    now = now or timezone.now()
    issued = []
    for instance, spot in over_max_price(now=now):
        reason = f"spot price {price_text(spot)}/GPU-hour is above its max price {price_text(instance.max_price)}"
        try:
            issued.append(issue_preemption_notice(actor="system", instance=instance, notice=notice, reason=reason,
                                                  now=now))
        except LifecycleError:
            continue  # ended or noticed meanwhile
    return issued


def preempt_due(*, now: datetime | None = None) -> list[PreemptionNotice]:
    """Preempt each instance whose notice has run out. Each notice is its own
    transaction: one that cannot be carried out is marked failed (and audited), and the
    rest go on."""
    now = now or timezone.now()
    done = []
    for pk in PreemptionNotice.objects.filter(status=NoticeStatus.PENDING, preempt_at__lte=now).values_list("pk", flat=True):
        try:
            item = _preempt_one(pk, now)
        except LifecycleError as exc:
            item = _notice_failed(pk, now, str(exc))
        if item is not None:
            done.append(item)
    return done


@transaction.atomic
def _preempt_one(pk: int, now: datetime) -> PreemptionNotice | None:
    item = PreemptionNotice.objects.select_for_update().select_related("instance").get(pk=pk)
    if item.status != NoticeStatus.PENDING:
        return None
    if item.instance.state == State.RUNNING:
        what = "spot capacity" if item.instance.pricing_model == PricingModel.SPOT else "idle capacity"
        preempt_instance(actor="system", instance=item.instance, reason=f"{what} reclaimed: {item.reason}", at=now)
        item.status = NoticeStatus.DONE
    else:
        item.status = NoticeStatus.MOOT
    item.done_at = now
    item.save(update_fields=["status", "done_at"])
    record_event(actor="system", action="billing.preemption.done", target=item.instance, team=item.team_id,
                 details={"notice": item.pk, "status": item.status})
    return item


@transaction.atomic
def _notice_failed(pk: int, now: datetime, why: str) -> PreemptionNotice:
    item = PreemptionNotice.objects.select_for_update().select_related("instance").get(pk=pk)
    item.status, item.done_at = NoticeStatus.FAILED, now
    item.save(update_fields=["status", "done_at"])
    record_event(actor="system", action="billing.preemption.done", target=item.instance, team=item.team_id,
                 outcome=Outcome.FAILURE, details={"notice": item.pk, "status": item.status, "error": why[:200]})
    return item


# --- inventory (operators) -------------------------------------------------------


@transaction.atomic
def register_host(*, actor, name: str, region: Region, kind: str = HostKind.PASSTHROUGH, nvlink_group: str = "") -> Host:
    host = Host.objects.create(name=name, region=region, kind=kind, nvlink_group=nvlink_group)
    record_event(actor=actor, action="host.register", target=host, details={"name": name, "region": region.name, "kind": kind})
    return host


@transaction.atomic
def update_host(*, actor, host: Host, **changes) -> Host:
    before = {field: getattr(host, field) for field in changes}
    for field, value in changes.items():
        setattr(host, field, value)
    host.full_clean()
    host.save()
    after = {k: (v.name if hasattr(v, "name") else v) for k, v in changes.items()}
    before = {k: (v.name if hasattr(v, "name") else v) for k, v in before.items()}
    record_event(actor=actor, action="host.update", target=host, details={"before": before, "after": after})
    return host


@transaction.atomic
def add_gpu(*, actor, host: Host, index: int, uuid: str, model: GpuModel, memory_total: int, pci_bus_id: str = "",
            nvlink_group: str = "") -> Gpu:
    gpu = Gpu.objects.create(host=host, index=index, uuid=uuid, model=model, memory_total=memory_total,
                             pci_bus_id=pci_bus_id, nvlink_group=nvlink_group)
    record_event(actor=actor, action="gpu.register", target=gpu, details={
        "host": host.name, "index": index, "uuid": uuid, "model": model.name, "nvlink_group": nvlink_group})
    return gpu


@transaction.atomic
def register_gpu_model(*, actor, name: str, memory_gb: int, power_limit_w: int, reported_as: str = "") -> GpuModel:
    """A GPU model first seen in a host's inventory. It has no price, so nothing can be
    launched on it until an operator prices it (launch answers 409 ``no_price``)."""
    model, created = GpuModel.objects.get_or_create(
        name=name, defaults={"memory_gb": memory_gb, "power_limit_w": power_limit_w}
    )
    if created:
        record_event(actor=actor, action="gpu_model.register", target=model,
                     details={"name": name, "memory_gb": memory_gb, "power_limit_w": power_limit_w,
                              "reported_as": reported_as, "priced": False})
    return model


@transaction.atomic
def register_slice_profile(*, actor, gpu_model: GpuModel, kind: str, name: str, memory_gb: int,
                           slices_per_gpu: int) -> SliceProfile:
    """A MIG/vGPU profile first seen in a host's inventory; unpriced until an operator
    prices its SKU."""
    profile, created = SliceProfile.objects.get_or_create(
        gpu_model=gpu_model, kind=kind, name=name, defaults={"memory_gb": memory_gb, "slices_per_gpu": slices_per_gpu}
    )
    if created:
        record_event(actor=actor, action="slice_profile.register", target=profile,
                     details={"sku": profile.sku, "memory_gb": memory_gb, "slices_per_gpu": slices_per_gpu,
                              "priced": False})
    return profile


def _announce(instance: Instance) -> None:
    from console.live import FLEET_GROUP, instance_group, publish_on_commit, team_group

    publish_on_commit(
        [team_group(instance.team_id), instance_group(instance.pk), FLEET_GROUP],
        "instance",
        {"id": instance.pk, "name": instance.name, "state": instance.state, "team": instance.team_id},
    )
