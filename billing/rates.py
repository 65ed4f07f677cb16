"""What things cost per hour now: each billable instance's price per hour and each
team's run rate (billable instances plus reservations, which are billed used or not).
The same rules as metering, applied to one instant: reservations (oldest first) cover
a team's running reserved whole GPUs of their model, oldest run first; the rest is
on-demand; spot pays the spot price in effect. Also the registered ``PriceBook`` that
lets instances refuse an unpriced launch and show costs without importing billing."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Max, Sum

from instances.catalog import InstanceCost, Quote, SpotOutlook
from instances.models import Instance, LifecycleEvent, PricingModel, State
from instances.transitions import is_stuck

from . import charts, costs, prices, pricing
from .models import Charge, MeterState, Reservation

BILLED_STATES = (State.RUNNING, State.STOPPING)


@dataclass
class RunRate:
    """Per hour, now: ``instances`` {id: price of its billable GPUs}, ``unused``
    {team id: reserved GPUs no instance uses × their price}, ``unpriced`` ids of
    billable instances with no price in effect (their usage is held, not billed)."""

    instances: dict[int, Decimal] = field(default_factory=dict)
    unused: dict[int, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    committed: dict[int, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    teams: dict[int, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    unpriced: set[int] = field(default_factory=set)
    notes: dict[int, str] = field(default_factory=dict)

    def team(self, team_id: int) -> Decimal:
        """The team's run rate: billable instances plus unused reservations, per hour."""
        return (self.teams.get(team_id, Decimal(0)) + self.unused.get(team_id, Decimal(0))).quantize(pricing.CENT)

    def team_committed(self, team_id: int) -> Decimal:
        """The part reservations bill per hour whatever runs."""
        return self.committed.get(team_id, Decimal(0))


def _sku(instance: Instance) -> str:
    return instance.slice_profile.sku if instance.slice_profile_id else instance.gpu_model.name


def run_rate(*, team_ids: Iterable[int] | None = None, now: datetime) -> RunRate:
    """Prices per hour now of the billable instances and reservations of ``team_ids``
    (every team when None)."""
    reservations = Reservation.objects.filter(start__lte=now, end__gt=now).order_by("start", "id")
    if team_ids is not None:
        team_ids = list(team_ids)
        reservations = reservations.filter(team_id__in=team_ids)
    billable = _billable(Instance.objects.all() if team_ids is None else Instance.objects.filter(team_id__in=team_ids),
                         now)
    skus = {_sku(i) for i in billable}
    listed = prices.in_effect(prices.ON_DEMAND, skus, now)
    spot = prices.in_effect(prices.SPOT, {_sku(i) for i in billable if i.pricing_model == PricingModel.SPOT}, now)
    idle = prices.in_effect(prices.IDLE, {_sku(i) for i in billable if i.pricing_model == PricingModel.IDLE}, now)
    out = RunRate()
    reserved = [i for i in billable if i.pricing_model == PricingModel.RESERVED and not i.slice_profile_id]
    held = list(reservations)
    for r in held:
        out.committed[r.team_id] += r.hourly * r.gpu_count
    coverage = _coverage(_uses(reserved, now), held, now)
    covered = _covered(coverage, held)
    for r in held:
        out.unused[r.team_id] += r.hourly * coverage.unused[r.pk]
    for instance in billable:
        sku = _sku(instance)
        price = {PricingModel.SPOT: spot, PricingModel.IDLE: idle}.get(instance.pricing_model, listed).get(sku)
        if price is None or (instance.pricing_model in (PricingModel.SPOT, PricingModel.IDLE) and sku not in listed):
            out.unpriced.add(instance.pk)
            continue
        if instance.pricing_model == PricingModel.SPOT:
            price = pricing.spot_rate(price, instance.max_price)
        held = covered.get(instance.pk, (0, Decimal(0)))
        hourly = held[1] + price * (instance.gpu_count - held[0])
        if instance.pricing_model == PricingModel.RESERVED:
            out.notes[instance.pk] = _reserved_note(instance, held, price)
        out.instances[instance.pk] = hourly
        out.teams[instance.team_id] += hourly
    return out


def _billable(instances, now: datetime) -> list[Instance]:
    """Those of ``instances`` billed now."""
    billable = instances.filter(state__in=BILLED_STATES).select_related("gpu_model", "slice_profile__gpu_model")
    return [i for i in billable if not stuck_past_grace(i, now)]


def _reserved_note(instance: Instance, held: tuple[int, Decimal], list_price: Decimal) -> str:
    gpus, cost = held
    rest = instance.gpu_count - gpus
    if instance.slice_profile_id:
        return "Reservations cover whole GPUs only: this slice instance bills on-demand."
    if not rest:
        return f"All {gpus} GPUs are covered by the team's reservations ({_rate(cost / gpus)}/h each)."
    if not gpus:
        return (f"No reservation has room for it now: all {rest} GPUs bill on-demand ({_rate(list_price)}/h each) "
                "until the team's reserved GPUs of this model free up.")
    return (f"{gpus} of its {instance.gpu_count} GPUs are covered by the team's reservations "
            f"({_rate(cost / gpus)}/h each); the other {rest} bill on-demand ({_rate(list_price)}/h each).")


# Reservations cover at an instant by the rule metering applies second by second
# (``pricing.allocate``): the one second from ``now``, in which what a commitment does
# not cover is its unused GPUs.
INSTANT = timedelta(seconds=1)
LAUNCH = -1  # the key of an instance not launched yet


def _uses(reserved: list[Instance], now: datetime) -> list[pricing.Use]:
    """The billable reserved whole-GPU instances as uses at ``now``, oldest run first."""
    starts = dict(
        LifecycleEvent.objects.filter(instance__in=reserved, to_state=State.RUNNING, time__lte=now)
        .values("instance_id").annotate(t=Max("time")).values_list("instance_id", "t")
    )
    return [pricing.Use(i.pk, now, now + INSTANT, i.gpu_count, (starts.get(i.pk, i.state_changed_at), i.pk))
            for i in reserved]


def _coverage(uses: list[pricing.Use], reservations: list[Reservation], now: datetime) -> pricing.Coverage:
    """Coverage of ``uses`` by ``reservations`` (in force at ``now``) over one second:
    GPU-seconds there are GPUs."""
    commitments = [pricing.Commitment(r.pk, r.start, now + INSTANT, r.gpu_count) for r in reservations]
    return pricing.allocate(uses, commitments, now, now + INSTANT)


def _covered(coverage: pricing.Coverage, reservations: list[Reservation]) -> dict[int, tuple[int, Decimal]]:
    """{instance id: (GPUs covered, their cost per hour)}."""
    hourly = {r.pk: r.hourly for r in reservations}
    covered: dict[int, tuple[int, Decimal]] = {}
    for (instance_id, rkey), pieces in coverage.covered.items():
        gpus, cost = covered.get(instance_id, (0, Decimal(0)))
        take = sum(g for _, _, g in pieces)
        covered[instance_id] = (gpus + take, cost + hourly[rkey] * take)
    return covered


def stuck_past_grace(instance: Instance, now: datetime) -> bool:
    """A ``stopping`` instance past the grace is not billed any more (metering stops at
    the grace too)."""
    return is_stuck(instance, now)


def metered_until(now: datetime) -> datetime | None:
    until = MeterState.objects.filter(id=1).values_list("metered_until", flat=True).first()
    return None if until is None else min(until, now)


ON_DEMAND_LINE = "On-demand: {listed}/h per GPU, billed per second (60-second minimum), stop any time."
RESERVED_SLICE_LINE = "Reserved covers whole GPUs only: a slice bills on-demand at {listed}/h."
IDLE_LINE = ("Idle capacity: {idle}/h (on-demand {listed}/h), billed per second; paying launches take the GPUs "
             "back with 2 minutes' notice and the job resumes when capacity frees.")
SPOT_LINE = ("Spot: {spot}/h now (on-demand {listed}/h); the price moves, and the platform may reclaim it with "
             "2 minutes' notice (a reclaim in the first hour is free).")


def _rate(value: Decimal) -> str:
    """An hourly price as people read it: its own decimals, at least 2 (1.794, 2.79)."""
    text = f"{value.quantize(Decimal('0.000001')).normalize():f}"
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


SPOT_OUTLOOK_DAYS = 7


def spot_outlook(sku: str, at: datetime, days: int = SPOT_OUTLOOK_DAYS) -> SpotOutlook | None:
    """The spot price of ``sku`` at ``at``, its low and high over the ``days`` before, the
    saving against on-demand, and the chart of it."""
    since = at - timedelta(days=days)
    schedule = prices.schedules(prices.SPOT, [sku], since, at).get(sku)
    if schedule is None:
        return None
    steps = [(max(t, since), p) for t, _, p in schedule.periods]
    hourly = [p for _, p in steps]
    now = hourly[-1]
    listed = prices.in_effect(prices.ON_DEMAND, [sku], at).get(sku)
    saving = None if not listed else int(((1 - now / listed) * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    figure = charts.spot_range(sku, [t for t, _ in steps] + [at], [*hourly, now], listed)
    return SpotOutlook(now, min(hourly), max(hourly), listed, saving, days, figure)


class BillingPriceBook:
    """What ``instances.catalog`` asks of billing."""

    def spot_outlook(self, *, sku: str, at: datetime) -> SpotOutlook | None:
        return spot_outlook(sku, at)

    def missing_price(self, *, sku: str, pricing_model: str, at: datetime) -> str | None:
        if sku not in prices.in_effect(prices.ON_DEMAND, [sku], at):
            return f"{sku} has no on-demand price in effect; an operator must price it before it can be launched."
        if pricing_model == PricingModel.SPOT and sku not in prices.in_effect(prices.SPOT, [sku], at):
            return f"{sku} has no spot price; an operator must set one before spot instances can be launched."
        if pricing_model == PricingModel.IDLE and sku not in prices.in_effect(prices.IDLE, [sku], at):
            return f"{sku} has no idle-capacity price; an operator must set one before low-priority jobs can run on it."
        return None

    def quote(self, *, sku: str, pricing_model: str, count: int, team_id: int | None, at: datetime) -> Quote:
        listed = prices.in_effect(prices.ON_DEMAND, [sku], at).get(sku)
        if listed is None:
            return Quote(None, None, f"{sku} has no price yet: it cannot be launched until an operator prices it.")
        if pricing_model == PricingModel.SPOT:
            spot = prices.in_effect(prices.SPOT, [sku], at).get(sku)
            if spot is None:
                return Quote(None, None, f"{sku} has no spot price yet.")
            return Quote(spot * count, spot, SPOT_LINE.format(spot=_rate(spot), listed=_rate(listed)))
        if pricing_model == PricingModel.IDLE:
            idle = prices.in_effect(prices.IDLE, [sku], at).get(sku)
            if idle is None:
                return Quote(None, None, f"{sku} has no idle-capacity price yet.")
            return Quote(idle * count, idle, IDLE_LINE.format(idle=_rate(idle), listed=_rate(listed)))
        if pricing_model != PricingModel.RESERVED or ":" in sku or team_id is None:
            note = RESERVED_SLICE_LINE if pricing_model == PricingModel.RESERVED and ":" in sku else ON_DEMAND_LINE
            return Quote(listed * count, listed, note.format(listed=_rate(listed)))
        return self._reserved_quote(sku, count, team_id, at, listed)

    def _reserved_quote(self, sku: str, count: int, team_id: int, at: datetime, listed: Decimal) -> Quote:
        """The launch covered as the run rate would cover it once running: after the
        team's running reserved instances, from what their reservations leave free."""
        held = list(Reservation.objects.filter(team_id=team_id, gpu_model__name=sku, start__lte=at, end__gt=at))
        total = sum(r.gpu_count for r in held)
        running = _billable(Instance.objects.filter(
            team_id=team_id, gpu_model__name=sku, slice_profile=None, pricing_model=PricingModel.RESERVED), at)
        launch = pricing.Use(LAUNCH, at, at + INSTANT, count, (at, math.inf))  # the newest run
        coverage = _coverage([*_uses(running, at), launch], held, at)
        gpus, cost = _covered(coverage, held).get(LAUNCH, (0, Decimal(0)))
        free, need = gpus + sum(coverage.unused.values()), count - gpus
        cost += listed * need
        if not total:
            note = f"Reserved: your team has no {sku} reservation now, so all {count} bill on-demand ({_rate(listed)}/h each)."
        else:
            note = (f"Reserved: {free} of your team's {total} reserved {sku} GPUs are free now; "
                    f"{count - need} would be covered at the reservation's price, {need} on-demand ({_rate(listed)}/h).")
        return Quote(cost, None, note)

    def instance_costs(self, instances: Iterable, *, now: datetime) -> dict[int, InstanceCost]:
        instances = list(instances)
        if not instances:
            return {}
        teams = {i.team_id for i in instances}
        rate = run_rate(team_ids=teams, now=now)
        month = pricing.month_start(now).date()
        spent = dict(
            Charge.objects.filter(instance__in=[i.pk for i in instances], month=month)
            .values("instance_id").annotate(c=Sum("billed_cents")).values_list("instance_id", "c")
        )
        as_of = metered_until(now)
        runs = _run_starts(instances, now)
        out = {}
        for i in instances:
            price, metered = rate.instances.get(i.pk), pricing.from_cents(spent.get(i.pk))
            since = unmetered_since(as_of, runs.get(i.pk), now)
            out[i.pk] = InstanceCost(
                price_per_hour=price, month_to_date=metered, as_of=as_of, note=rate.notes.get(i.pk, ""),
                since=since if price is not None else None, so_far=pricing.so_far(metered, price, since, now),
            )
        return out


def _run_starts(instances: list, now: datetime) -> dict[int, datetime]:
    """{instance id: when its latest run began} (the last time it became running)."""
    return dict(
        LifecycleEvent.objects.filter(instance__in=[i.pk for i in instances], to_state=State.RUNNING, time__lte=now)
        .order_by().values("instance_id").annotate(t=Max("time")).values_list("instance_id", "t")
    )


def unmetered_since(as_of: datetime | None, run_start: datetime | None, now: datetime) -> datetime:
    """From when an instance's usage this month is not metered yet: where metering
    stopped, or where its run began if that is later (a run that began after the last
    metering has cost nothing before it began)."""
    return max(t for t in (pricing.month_start(now), as_of, run_start) if t is not None)


@dataclass(frozen=True)
class IdleBilledGpu:
    """A GPU billed now whose last ``window`` was mostly idle."""

    instance_id: int
    instance: str
    team: str
    gpu: str
    idle_pct: Decimal
    price_per_hour: Decimal


IDLE_NOW_MIN_OBSERVED = timedelta(minutes=15)


def idle_billed_gpus(instances, now: datetime, window: timedelta = timedelta(hours=1),
                     min_idle_pct: int = 50, min_observed: timedelta = IDLE_NOW_MIN_OBSERVED) -> list[IdleBilledGpu]:
    """GPUs of billable ``instances`` (a queryset the caller scoped) idle at least
    ``min_idle_pct`` of the observed time in the last ``window``, with what each costs
    per hour: the money burning on GPUs nobody uses, busy neighbours or not. A GPU
    observed for less than ``min_observed`` of the window (one launched minutes ago) is
    left out: a few minutes say nothing about the hour."""
    billable = list(instances.filter(state__in=BILLED_STATES).select_related("team"))
    if not billable:
        return []
    rate = run_rate(team_ids={i.team_id for i in billable}, now=now)
    by_id = {i.pk: i for i in billable}
    out = []
    for (iid, uuid), (observed, idle) in costs.gpu_activity(list(by_id), now - window, now).items():
        instance = by_id[iid]
        price = rate.instances.get(iid)
        if observed <= 0 or observed < min_observed.total_seconds() or price is None \
                or idle * 100 < observed * min_idle_pct:
            continue
        out.append(IdleBilledGpu(iid, instance.name, instance.team.name, uuid,
                                 (Decimal(idle) * 100 / observed).quantize(Decimal("0.1")),
                                 (price / instance.gpu_count).quantize(pricing.CENT)))
    out.sort(key=lambda g: (-g.price_per_hour, -g.idle_pct, g.instance, g.gpu))
    return out
