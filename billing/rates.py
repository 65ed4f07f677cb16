"""What things cost per hour now: each billable instance's price per hour and each
team's run rate (billable instances plus reservations, which are billed used or not).
The same rules as metering, applied to one instant: reservations (oldest first) cover
a team's running reserved whole GPUs of their model, oldest run first; the rest is
on-demand; spot pays the spot price in effect. Also the registered ``PriceBook`` that
lets instances refuse an unpriced launch and show costs without importing billing."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Max, Q, Sum

from instances.catalog import InstanceCost, Quote, SpotOutlook
from instances.models import Instance, LifecycleEvent, PricingModel, State
from instances.services import is_stuck

from . import charts, pricing
from .models import Charge, MeterState, Price, PriceKind, Reservation, SpotPrice

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


def on_demand_prices(skus: Iterable[str], at: datetime, kind: str = PriceKind.ON_DEMAND) -> dict[str, Decimal]:
    rows = (
        Price.objects.filter(sku__in=set(skus), kind=kind, effective_from__lte=at)
        .filter(Q(effective_until__isnull=True) | Q(effective_until__gt=at))
        .values_list("sku", "hourly")
    )
    return dict(rows)


def spot_prices(skus: Iterable[str], at: datetime) -> dict[str, Decimal]:
    out = {}
    for sku in sorted(set(skus)):
        price = SpotPrice.objects.filter(sku=sku, time__lte=at).order_by("-time").values_list("hourly", flat=True).first()
        if price is not None:
            out[sku] = price
    return out


def idle_prices(skus: Iterable[str], at: datetime) -> dict[str, Decimal]:
    """The idle-capacity price per GPU-hour that low-priority jobs pay, per SKU."""
    return on_demand_prices(skus, at, PriceKind.IDLE)


def _sku(instance: Instance) -> str:
    return instance.slice_profile.sku if instance.slice_profile_id else instance.gpu_model.name


def run_rate(*, team_ids: Iterable[int] | None = None, now: datetime) -> RunRate:
    """Prices per hour now of the billable instances and reservations of ``team_ids``
    (every team when None)."""
    billable = Instance.objects.filter(state__in=BILLED_STATES).select_related("gpu_model", "slice_profile__gpu_model")
    reservations = Reservation.objects.filter(start__lte=now, end__gt=now)
    if team_ids is not None:
        team_ids = list(team_ids)
        billable = billable.filter(team_id__in=team_ids)
        reservations = reservations.filter(team_id__in=team_ids)
    billable = [i for i in billable if not stuck_past_grace(i, now)]
    skus = {_sku(i) for i in billable}
    listed = on_demand_prices(skus, now)
    spot = spot_prices({_sku(i) for i in billable if i.pricing_model == PricingModel.SPOT}, now)
    idle = idle_prices({_sku(i) for i in billable if i.pricing_model == PricingModel.IDLE}, now)
    out = RunRate()
    reserved = [i for i in billable if i.pricing_model == PricingModel.RESERVED and not i.slice_profile_id]
    covered = _cover(reserved, list(reservations.order_by("start", "id")), now, out)
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


def _cover(reserved: list[Instance], reservations: list[Reservation], now: datetime, out: RunRate) -> dict:
    """{instance id: (GPUs covered, their cost per hour)}; what no instance uses goes to
    ``out.unused``."""
    starts = dict(
        LifecycleEvent.objects.filter(instance__in=reserved, to_state=State.RUNNING, time__lte=now)
        .values("instance_id").annotate(t=Max("time")).values_list("instance_id", "t")
    )
    pools = defaultdict(list)
    for r in reservations:
        pools[(r.team_id, r.gpu_model_id)].append([r, r.gpu_count])
        out.committed[r.team_id] += r.hourly * r.gpu_count
    covered: dict[int, tuple[int, Decimal]] = {}
    for instance in sorted(reserved, key=lambda i: (starts.get(i.pk, i.state_changed_at), i.pk)):
        need, cost = instance.gpu_count, Decimal(0)
        for slot in pools.get((instance.team_id, instance.gpu_model_id), []):
            take = min(need, slot[1])
            slot[1] -= take
            need -= take
            cost += slot[0].hourly * take
        covered[instance.pk] = (instance.gpu_count - need, cost)
    for pool in pools.values():
        for r, left in pool:
            out.unused[r.team_id] += r.hourly * left
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
    before = SpotPrice.objects.filter(sku=sku, time__lte=since).order_by("-time").values_list("time", "hourly")[:1]
    steps = [(max(t, since), p) for t, p in before]
    steps += SpotPrice.objects.filter(sku=sku, time__gt=since, time__lte=at).order_by("time").values_list("time", "hourly")
    if not steps:
        return None
    prices = [p for _, p in steps]
    now = prices[-1]
    listed = on_demand_prices([sku], at).get(sku)
    saving = None if not listed else int(((1 - now / listed) * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    figure = charts.spot_range(sku, [t for t, _ in steps] + [at], [*prices, now], listed)
    return SpotOutlook(now, min(prices), max(prices), listed, saving, days, figure)


class BillingPriceBook:
    """What ``instances.catalog`` asks of billing."""

    def spot_outlook(self, *, sku: str, at: datetime) -> SpotOutlook | None:
        return spot_outlook(sku, at)

    def missing_price(self, *, sku: str, pricing_model: str, at: datetime) -> str | None:
        if sku not in on_demand_prices([sku], at):
            return f"{sku} has no on-demand price in effect; an operator must price it before it can be launched."
        if pricing_model == PricingModel.SPOT and sku not in spot_prices([sku], at):
            return f"{sku} has no spot price; an operator must set one before spot instances can be launched."
        if pricing_model == PricingModel.IDLE and sku not in idle_prices([sku], at):
            return f"{sku} has no idle-capacity price; an operator must set one before low-priority jobs can run on it."
        return None

    def quote(self, *, sku: str, pricing_model: str, count: int, team_id: int | None, at: datetime) -> Quote:
        listed = on_demand_prices([sku], at).get(sku)
        if listed is None:
            return Quote(None, None, f"{sku} has no price yet: it cannot be launched until an operator prices it.")
        if pricing_model == PricingModel.SPOT:
            spot = spot_prices([sku], at).get(sku)
            if spot is None:
                return Quote(None, None, f"{sku} has no spot price yet.")
            return Quote(spot * count, spot, SPOT_LINE.format(spot=_rate(spot), listed=_rate(listed)))
        if pricing_model == PricingModel.IDLE:
            idle = idle_prices([sku], at).get(sku)
            if idle is None:
                return Quote(None, None, f"{sku} has no idle-capacity price yet.")
            return Quote(idle * count, idle, IDLE_LINE.format(idle=_rate(idle), listed=_rate(listed)))
        if pricing_model != PricingModel.RESERVED or ":" in sku or team_id is None:
            note = RESERVED_SLICE_LINE if pricing_model == PricingModel.RESERVED and ":" in sku else ON_DEMAND_LINE
            return Quote(listed * count, listed, note.format(listed=_rate(listed)))
        return self._reserved_quote(sku, count, team_id, at, listed)

    def _reserved_quote(self, sku: str, count: int, team_id: int, at: datetime, listed: Decimal) -> Quote:
        held = list(Reservation.objects.filter(team_id=team_id, gpu_model__name=sku, start__lte=at, end__gt=at)
                    .order_by("start", "id"))
        total = sum(r.gpu_count for r in held)
        used = sum(Instance.objects.filter(
            team_id=team_id, gpu_model__name=sku, slice_profile=None, pricing_model=PricingModel.RESERVED,
            state__in=BILLED_STATES).values_list("gpu_count", flat=True))
        free, cost, need = max(0, total - used), Decimal(0), count
        left = free
        for r in held:  # the free part of the oldest reservations first
            room = min(need, left, r.gpu_count)
            cost += r.hourly * room
            need -= room
            left -= room
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
