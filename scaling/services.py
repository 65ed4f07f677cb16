"""Scaling groups' verbs: create and change a group, take a pushed queue depth, and
evaluate a group (decide, launch or stop, record the decision, audit what changed).
Launches and stops go through ``instances.lifecycle``, so placement, prices, billing
and the instances' own audit records are the same as for any launch."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Avg
from django.utils import timezone

from audit.recording import record_event
from console.validators import ascii_decimal, plain_name
from instances import catalog, images
from instances import lifecycle as instance_lifecycle
from instances import placement as instance_placement
from instances import preemption as instance_preemption
from instances import transitions as instance_transitions
from instances.models import LAUNCHABLE, GpuModel, Instance, PricingModel, State
from network import interfaces as network_interfaces

from . import policy
from .models import Action, MetricSource, Reason, ScalingDecision, ScalingGroup, ScalingMember

logger = logging.getLogger(__name__)

MAX_INSTANCES = 64  # per group
MAX_TARGET = 1_000_000  # queued items per instance
MAX_COOLDOWN_S = 86_400
MAX_QUEUE_DEPTH = 1_000_000_000
MAX_PRICE = Decimal("1000")  # per GPU-hour, where the model has no on-demand price
UTIL_WINDOW = timedelta(minutes=5)
DECISIONS_KEPT = timedelta(days=30)
# States in which a group's instance counts toward what it has (stopping ones are leaving).
ACTIVE_STATES = (State.PENDING, State.RUNNING)
SETTINGS = (
    "gpu_model", "gpus_per_instance", "image", "pricing_model", "max_price", "min_instances", "max_instances",
    "target_per_instance", "scale_out_cooldown_s", "scale_in_cooldown_s", "metric_source",
)
# Where its instances are attached (network.interfaces.check_choice), given beside SETTINGS.
NETWORK = ("subnet", "security_groups")


def metric_stale_after() -> timedelta:
    """A pushed queue depth older than this is not acted on (the pusher may be down)."""
    return timedelta(seconds=getattr(settings, "SCALING_METRIC_STALE_S", 600))


# --- settings ------------------------------------------------------------------------------


def _whole(errors: dict, field: str, value, low: int, high: int, what: str):
    if isinstance(value, bool) or not isinstance(value, int):
        errors[field] = f"{what} must be a whole number."
    elif not low <= value <= high:
        errors[field] = f"{what} must be between {low} and {high}; got {value}."


def check_settings(values: dict, *, team, now: datetime | None = None) -> dict:
    """Every rule on a group's settings, with a message naming the field; raises
    ValidationError with all that are broken."""
    errors: dict[str, str] = {}
    now = now or timezone.now()
    if not isinstance(values.get("gpu_model"), GpuModel):
        errors["gpu_model"] = "Name a GPU model on offer (GET /api/v1/gpu-models/)."
    elif values.get("image") is not None:
        try:  # the rules of a launch: the team may use it, not retired, supports the model
            images.image_for_launch(image=values["image"], team=team, gpu_model=values["gpu_model"])
        except ValidationError as exc:
            errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
    _whole(errors, "gpus_per_instance", values.get("gpus_per_instance"), 1, instance_placement.MAX_GPUS_PER_INSTANCE,
           "GPUs per instance")
    if values.get("pricing_model") not in dict(LAUNCHABLE):
        errors["pricing_model"] = f"Pricing model is one of {', '.join(dict(LAUNCHABLE))}."
    _whole(errors, "min_instances", values.get("min_instances"), 0, MAX_INSTANCES, "The minimum")
    _whole(errors, "max_instances", values.get("max_instances"), 1, MAX_INSTANCES, "The maximum")
    if "min_instances" not in errors and "max_instances" not in errors and values["min_instances"] > values["max_instances"]:
        errors["min_instances"] = (f"The minimum ({values['min_instances']}) is above the maximum "
                                   f"({values['max_instances']}).")
    _whole(errors, "target_per_instance", values.get("target_per_instance"), 1, MAX_TARGET,
           "The target of queued items per instance")
    for field, what in (("scale_out_cooldown_s", "The scale-out cooldown"), ("scale_in_cooldown_s", "The scale-in cooldown")):
        _whole(errors, field, values.get(field), 0, MAX_COOLDOWN_S, f"{what} (seconds)")
    if values.get("metric_source") not in MetricSource.values:
        errors["metric_source"] = f"The metric source is one of {', '.join(MetricSource.values)}."
    price = values.get("max_price")
    if price is not None:
        try:
            price = ascii_decimal(price) if not isinstance(price, (bool, float)) else None
        except ValueError:
            price = None
        if price is None or not price.is_finite():
            errors["max_price"] = "The max price is a decimal number per GPU-hour, e.g. \"1.20\"."
        elif values.get("pricing_model") != PricingModel.SPOT:
            errors["max_price"] = "A max price applies to spot groups only."
        elif not Decimal(0) < price <= _price_ceiling(values.get("gpu_model"), now):
            ceiling = _price_ceiling(values.get("gpu_model"), now).normalize()
            errors["max_price"] = f"The max price is above 0 and at most {ceiling:f} per GPU-hour."
        else:
            values["max_price"] = price.quantize(Decimal("0.000001"))
    if errors:
        raise ValidationError(errors)
    return values


def _price_ceiling(gpu_model, now: datetime) -> Decimal:
    """A launch's ceiling on a max price: a multiple of the on-demand price where there
    is one (instances.preemption.MAX_PRICE_CEILING), else MAX_PRICE."""
    if not isinstance(gpu_model, GpuModel):
        return MAX_PRICE
    quote = catalog.quote(sku=gpu_model.name, pricing_model=PricingModel.ON_DEMAND, count=1, team_id=None, at=now)
    listed = getattr(quote, "per_gpu_hour", None)
    return MAX_PRICE if listed is None else listed * instance_preemption.MAX_PRICE_CEILING


def _described(group: ScalingGroup) -> dict:
    out = {field: getattr(group, field) for field in SETTINGS}
    out["gpu_model"] = group.gpu_model.name
    out["image"] = None if group.image is None else group.image.name
    out["max_price"] = None if group.max_price is None else str(group.max_price)
    out["network"] = network_interfaces.describe_choice(group.network)
    return out


def _network(team, wanted: dict, current: dict | None = None) -> dict:
    current = current or {}
    return network_interfaces.check_choice(
        team=team, subnet=wanted.get("subnet", current.get("subnet")),
        groups=wanted.get("security_groups", current.get("security_groups")))


@transaction.atomic
def create_group(*, actor, team, name: str, now: datetime | None = None, **values) -> ScalingGroup:
    plain_name(name)
    if ScalingGroup.objects.live().filter(team=team, name=name).exists():
        raise ValidationError({"name": f"Your team has a scaling group named {name!r} already."})
    values = {"pricing_model": PricingModel.ON_DEMAND, "min_instances": 1, "scale_out_cooldown_s": 120,
              "scale_in_cooldown_s": 300, "metric_source": MetricSource.PUSHED, "max_price": None, **values}
    values.setdefault("image", None)
    network = _network(team, {k: values.pop(k) for k in NETWORK if k in values})
    check_settings(values, team=team, now=now)
    group = ScalingGroup.objects.create(
        team=team, name=name, created_at=now or timezone.now(), network=network,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
        **{field: values[field] for field in SETTINGS},
    )
    record_event(actor=actor, action="scaling_group.create", target=group, team=team,
                 details={"name": name, **_described(group)})
    return group


@transaction.atomic
def update_group(*, actor, group: ScalingGroup, **changes) -> ScalingGroup:
    """Change a group's template or bounds; the next evaluation applies them."""
    group = _locked(group)
    before = _described(group)
    wanted = {k: changes.pop(k) for k in NETWORK if k in changes}
    network = _network(group.team, wanted, group.network) if wanted else group.network
    values = check_settings({**{field: getattr(group, field) for field in SETTINGS}, **changes}, team=group.team)
    for field in SETTINGS:
        setattr(group, field, values[field])
    group.network = network
    group.save(update_fields=[*SETTINGS, "network"])
    after = _described(group)
    changed = {k: {"from": before[k], "to": after[k]} for k in (*SETTINGS, "network") if before[k] != after[k]}
    if changed:
        record_event(actor=actor, action="scaling_group.update", target=group, team=group.team_id,
                     details={"changed": changed})
    return group


def _locked(group: ScalingGroup) -> ScalingGroup:
    """The group's row, locked for this transaction; a deleted group cannot change."""
    group = ScalingGroup.objects.select_for_update(of=("self",)).select_related("team", "gpu_model", "image").get(
        pk=group.pk)
    if group.deleted_at is not None:
        raise ValidationError({"group": f"Scaling group {group.name} was deleted."})
    return group


@transaction.atomic
def delete_group(*, actor, group: ScalingGroup, now: datetime | None = None) -> list[Instance]:
    """Terminate the group's instances that hold GPUs or are stopped (newest first), then
    retire the group: it is no longer evaluated or listed, its name is free again, and
    its row stays for the cost explorer and the audit log. Returns the terminated."""
    now = now or timezone.now()
    group = _locked(group)
    ending = Instance.objects.filter(scaling_member__group=group).exclude(
        state__in=(State.TERMINATED, State.PREEMPTED)).order_by("-created_at", "-id")
    terminated = [instance_lifecycle.terminate_instance(actor=actor, instance=i, at=now) for i in ending]
    group.deleted_at = now
    group.save(update_fields=["deleted_at"])
    record_event(actor=actor, action="scaling_group.delete", target=group, team=group.team_id,
                 details={"name": group.name, "terminated": [i.name for i in terminated]})
    return terminated


def check_queue_depth(value) -> int:
    """A queue depth as a team sends it: a whole JSON number, 0 … 10⁹."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError({"queue_depth": "The queue depth is a number of queued items, e.g. 42."})
    if isinstance(value, float) and not value.is_integer():
        raise ValidationError({"queue_depth": "The queue depth is a whole number of items."})
    value = int(value)
    if not 0 <= value <= MAX_QUEUE_DEPTH:
        raise ValidationError({"queue_depth": f"The queue depth is between 0 and {MAX_QUEUE_DEPTH}."})
    return value


def push_queue_depth(*, group: ScalingGroup, queue_depth, now: datetime | None = None) -> ScalingGroup:
    """Store the depth a team pushed. Pushes are data, not changes, so they are not
    audited; the decisions they cause are."""
    depth = check_queue_depth(queue_depth)
    if group.metric_source != MetricSource.PUSHED:
        raise ValidationError({"queue_depth": f"Scaling group {group.name} takes its depth from "
                                              f"{group.get_metric_source_display().lower()}, not from pushes."})
    now = now or timezone.now()
    if not ScalingGroup.objects.live().filter(pk=group.pk).update(queue_depth=depth, queue_depth_at=now):
        raise ValidationError({"group": f"Scaling group {group.name} was deleted."})
    group.queue_depth, group.queue_depth_at = depth, now
    return group


# --- what a group has and sees ---------------------------------------------------------------


def active_instances(group: ScalingGroup):
    """The group's instances that hold GPUs and are not stopping, newest first."""
    return Instance.objects.filter(scaling_member__group=group, state__in=ACTIVE_STATES).order_by("-created_at", "-id")


def with_running(groups):
    """Groups annotated with ``running_count``: what ``active_instances(g).count()`` gives,
    for a whole list in its one query."""
    from django.db.models import Count, Q

    return groups.annotate(
        running_count=Count("members", filter=Q(members__instance__state__in=ACTIVE_STATES))
    ).order_by(*ScalingGroup._meta.ordering)  # a grouped query drops the model's ordering


def latest_decisions(groups) -> dict[int, ScalingDecision]:
    """{group id: its latest decision} for a list of groups, in two queries whatever
    their number (groups without a decision are left out)."""
    from django.db.models import OuterRef, Subquery

    newest = ScalingDecision.objects.filter(group=OuterRef("pk")).order_by("-time", "-id").values("id")[:1]
    ids = ScalingGroup.objects.filter(pk__in=[g.pk for g in groups]).annotate(latest=Subquery(newest))
    found = ScalingDecision.objects.in_bulk([i for i in ids.values_list("latest", flat=True) if i is not None])
    return {d.group_id: d for d in found.values()}


def current_depth(group: ScalingGroup, now: datetime) -> int | None:
    """The queue depth the group acts on now, or None when it has none fresh.

    Pushed: the latest push, if younger than SCALING_METRIC_STALE_S. GPU utilization:
    the sum over its running instances of their mean utilization (%) over the last 5
    minutes, so a target of 70 keeps instances about 70% busy."""
    if group.metric_source == MetricSource.PUSHED:
        fresh = group.queue_depth_at is not None and now - group.queue_depth_at <= metric_stale_after()
        return group.queue_depth if fresh else None
    from monitoring.models import Sample

    means = (
        Sample.objects.filter(instance__in=active_instances(group), time__gt=now - UTIL_WINDOW, time__lte=now,
                              gpu_util__isnull=False)
        .values("instance_id").annotate(util=Avg("gpu_util")).values_list("util", flat=True)
    )
    means = list(means)
    return round(sum(means)) if means else None


# --- evaluation ------------------------------------------------------------------------------


class Refused(Exception):
    """A launch of the group's template is refused whatever the capacity."""


@dataclass
class Outcome:
    launched: list[Instance]
    ended: list[Instance]  # terminated by a scale-in
    problem: str = ""  # why fewer were launched than planned
    refused: bool = False  # the template was refused, not short of room


def _spot_too_dear(group: ScalingGroup, now: datetime) -> str:
    if group.max_price is None:
        return ""
    quote = catalog.quote(sku=group.gpu_model.name, pricing_model=PricingModel.SPOT, count=1,
                          team_id=group.team_id, at=now)
    spot = getattr(quote, "per_gpu_hour", None)
    if spot is not None and spot > group.max_price:
        return f"spot at {spot.normalize():f} per GPU-hour is above the max price {group.max_price.normalize():f}"
    return ""


def _launch_one(group: ScalingGroup, now: datetime, provision: bool) -> tuple[Instance | None, str]:
    """Launch one instance of the template: spot first where the group allows it, then
    on-demand. Returns (the instance or None, what stood in the way)."""
    tries = [group.pricing_model]
    notes = []
    if group.pricing_model == PricingModel.SPOT:
        tries.append(PricingModel.ON_DEMAND)
        dear = _spot_too_dear(group, now)
        if dear:
            tries, notes = [PricingModel.ON_DEMAND], [dear]
    for pricing_model in tries:
        name = f"{group.name}-{group.launched_total + 1}"
        try:
            # A refused launch undoes itself (its own savepoint); the preemption notices
            # an on-demand launch short of room gives spot instances stand, as for any launch.
            with network_interfaces.launching_on(actor="system", team=group.team, choice=group.network):
                instance = instance_lifecycle.launch_instance(
                    actor="system", team=group.team, name=name, gpu_model=group.gpu_model,
                    gpu_count=group.gpus_per_instance, pricing_model=pricing_model, at=now, provision=provision,
                    labels={"scaling-group": group.name}, image=group.image,
                    max_price=group.max_price if pricing_model == PricingModel.SPOT else None,
                )
        except instance_transitions.LifecycleError as exc:
            notes.append(f"{PricingModel(pricing_model).label.lower()}: {exc}")
            continue
        except ValidationError as exc:  # the template itself is refused (a retired image, a deleted subnet)
            raise Refused("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
        ScalingMember.objects.create(group=group, instance=instance, joined_at=now)
        group.launched_total += 1
        return instance, "; ".join(notes)
    return None, "; ".join(notes)


def _scale_out(group: ScalingGroup, count: int, now: datetime, provision: bool) -> Outcome:
    out = Outcome([], [])
    for _ in range(count):
        try:
            instance, note = _launch_one(group, now, provision)
        except Refused as exc:
            out.problem, out.refused = str(exc), True
            break
        if instance is None:
            out.problem = note
            break
        out.launched.append(instance)
        if note:
            out.problem = note  # launched, but not as the template prefers
    return out


def _scale_in(group: ScalingGroup, count: int, now: datetime) -> Outcome:
    """Terminate the newest ``count`` instances: a group's instances are cattle, and a
    stopped one would only pile up (scaling out launches fresh ones)."""
    ended = [instance_lifecycle.terminate_instance(actor="system", instance=instance, at=now)
             for instance in list(active_instances(group)[:count])]
    return Outcome([], ended)


def _summary(plan: policy.Plan, done: Outcome) -> tuple[str, str, str]:
    """(action, reason, message) of what happened, which may fall short of the plan."""
    if plan.action == Action.SCALE_IN:
        names = ", ".join(i.name for i in done.ended)
        return Action.SCALE_IN, plan.reason, f"{plan.message}; terminated {names}"
    if plan.action != Action.SCALE_OUT:
        return Action.NONE, plan.reason, plan.message
    names = ", ".join(f"{i.name} ({i.get_pricing_model_display().lower()})" for i in done.launched)
    if len(done.launched) < plan.count:
        what = f"launched {names}" if names else "launched nothing"
        action = Action.SCALE_OUT if done.launched else Action.NONE
        reason = Reason.REFUSED if done.refused else Reason.NO_CAPACITY
        return action, reason, f"{plan.message}; {what}: {done.problem}"
    extra = f"; {done.problem}" if done.problem else ""
    return Action.SCALE_OUT, plan.reason, f"{plan.message}; launched {names}{extra}"


@transaction.atomic
def evaluate_group(group: ScalingGroup, *, now: datetime | None = None, provision: bool = True) -> ScalingDecision:
    """Decide, act within bounds, cooldowns and capacity, and record the decision (and
    audit it when it launched or terminated anything). ``provision=False`` leaves new
    instances pending (the demo walks them itself)."""
    now = now or timezone.now()
    group = _locked(group)
    depth = current_depth(group, now)
    current = active_instances(group).count()
    bounds = policy.Bounds(group.min_instances, group.max_instances, group.target_per_instance,
                           group.scale_out_cooldown_s, group.scale_in_cooldown_s)
    plan = policy.decide(queue_depth=depth, current=current, bounds=bounds, now=now,
                         last_scale_out_at=group.last_scale_out_at, last_scale_in_at=group.last_scale_in_at)
    if plan.action == Action.SCALE_OUT:
        done = _scale_out(group, plan.count, now, provision)
    elif plan.action == Action.SCALE_IN:
        done = _scale_in(group, plan.count, now)
    else:
        done = Outcome([], [])
    action, reason, message = _summary(plan, done)
    if done.launched:
        group.last_scale_out_at = now
    if done.ended:
        group.last_scale_in_at = now
    group.save(update_fields=["last_scale_out_at", "last_scale_in_at", "launched_total"])
    decision = ScalingDecision.objects.create(
        group=group, time=now, queue_depth=depth, desired=plan.desired,
        running=current + len(done.launched) - len(done.ended), action=action,
        changed=len(done.launched) + len(done.ended), reason=reason, message=message[:300],
    )
    if decision.changed:
        record_event(actor="system", action=f"scaling_group.{action}", target=group, team=group.team_id, details={
            "queue_depth": depth, "desired": plan.desired, "running": decision.running, "reason": reason,
            "launched": [i.name for i in done.launched], "terminated": [i.name for i in done.ended],
            "message": decision.message,
        })
    return decision


def evaluate_all(*, now: datetime | None = None) -> list[ScalingDecision]:
    """One evaluation of every group, each in its own transaction: one group's failure
    leaves the others' decisions standing."""
    now = now or timezone.now()
    done = []
    for group in ScalingGroup.objects.live().order_by("pk"):
        try:
            done.append(evaluate_group(group, now=now))
        except Exception:
            logger.exception("evaluating scaling group %s failed", group.pk)
    return done


def prune_decisions(*, now: datetime | None = None) -> int:
    """Decisions older than 30 days go (what they changed stays in the audit log)."""
    now = now or timezone.now()
    return ScalingDecision.objects.filter(time__lt=now - DECISIONS_KEPT).delete()[0]
