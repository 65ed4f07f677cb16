"""Metering and rating: lifecycle events → usage records per instance and UTC day →
rated charges. Reads and writes rows; every price is applied by ``billing.pricing``.

A window is widened to whole UTC days and every day in it is rebuilt from the complete
event history of the instances that could have run then, so metering a window twice,
or in two halves, gives the same rows as once. Callers hold the transaction.

How it is fast: everything a window needs is read first (the instances, held against
deletion in one statement, their events with timestamps as text, every price schedule
and reservation); then charges stream to PostgreSQL in one binary COPY as each
instance's are complete, so the database stores them while Python rates the next; the
usage records, kept meanwhile, follow in one more COPY. Memory therefore grows with the
window (about 50 MiB for a month of 10,000 instances; the periodic task meters a day at
a time). A large window in a transaction that has written nothing yet is read and rated
by worker processes instead (``_meter_spread``, ``console.snapshot_workers``), which send
their rows encoded for COPY: this process only deletes the old rows and writes the new.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.db.models import Q, TextField, Value
from django.db.models.functions import Cast, Mod

from console import bulk, snapshot_workers
from instances.models import HOLDING_STATES, Host, Instance, LifecycleEvent, PricingModel
from instances.transitions import stopping_grace

from . import prices, pricing
from .models import (
    Charge,
    ChargeType,
    Price,
    PricingCategory,
    Reservation,
    SpotPrice,
    UnratedUsage,
    UsageRecord,
)

BATCH = 2000
USAGE_COLUMNS = ("team_id", "instance_id", "gpu_model_id", "sku", "pricing_model", "region", "period_start", "start",
                 "end", "gpus", "run_start", "run_end", "preempted")
CHARGE_COLUMNS = ("team_id", "instance_id", "reservation_id", "gpu_model_id", "sku", "region", "month",
                  "period_start", "period_end", "charge_type", "pricing_category", "consumed_seconds",
                  "priced_seconds", "unit_price", "list_unit_price", "list_cents", "billed_cents", "note")
FREE_NOTE = "preempted by the platform within its first hour: free"
MINIMUM_NOTE = "includes the 60-second minimum"
OVERFLOW_NOTE = "beyond the reservation: on-demand"
SLICE_NOTE = "reservations cover whole GPUs; slices are on-demand"
IDLE_NOTE = "low-priority job in idle capacity"


@dataclass
class Result:
    start: datetime
    end: datetime
    usage_records: int = 0
    charges: int = 0
    unrated: int = 0
    months: set[tuple[int, date]] = field(default_factory=set)
    workers: int = 1  # processes that rated the window


@dataclass(frozen=True)
class Meta:
    team_id: int
    gpu_model_id: int
    sku: str
    pricing_model: str
    whole: bool
    max_price: Decimal | None = None  # spot: the most it pays per GPU-hour


def _as_text(field: str) -> Cast:
    """A timestamp column read as text: tens of thousands of rows are read per window,
    and parsing them with ``datetime.fromisoformat`` is several times faster than the
    database driver's timestamp conversion (see ``_utc``)."""
    return Cast(field, TextField())


def _utc(text: str) -> datetime:
    """A timestamp read with ``_as_text`` as an aware UTC datetime (PostgreSQL writes
    the session's offset; SQLite stores UTC without one)."""
    t = datetime.fromisoformat(text)
    if t.tzinfo is None:
        return t.replace(tzinfo=UTC)
    return t if t.tzinfo is UTC else t.astimezone(UTC)


class Catalog:
    """Price schedules for the window, loaded once (``billing.prices``)."""

    def __init__(self, start: datetime, end: datetime):
        self.start, self.end = start, end
        self.on_demand = prices.schedules(prices.ON_DEMAND, None, self.start, self.end)
        self.spot: dict[str, pricing.Schedule] = {}
        self.idle: dict[str, pricing.Schedule | None] = {}

    def preload(self, spot_skus: set[str], idle_skus: set[str]) -> None:
        """Read every spot and idle-capacity schedule metering will ask for, so that
        nothing is read while usage records stream to the database."""
        spot = prices.schedules(prices.SPOT, spot_skus, self.start, self.end)
        self.spot.update({sku: spot.get(sku, pricing.Schedule(sku, ())) for sku in spot_skus})
        idle = prices.schedules(prices.IDLE, idle_skus, self.start, self.end)
        self.idle.update({sku: idle.get(sku) for sku in idle_skus})

    def preload_all(self) -> None:
        """Read every spot and idle-capacity schedule of the window, whatever SKUs the
        instances turn out to have (before rating workers start: they read no prices)."""
        skus = set(Price.objects.order_by().values_list("sku", flat=True).distinct()) | set(
            SpotPrice.objects.order_by().values_list("sku", flat=True).distinct())
        self.preload(skus, skus)

    def list_schedule(self, sku: str) -> pricing.Schedule:
        try:
            return self.on_demand[sku]
        except KeyError:
            raise pricing.PricingError(f"No on-demand price for {sku}.") from None

    def idle_schedule(self, sku: str) -> pricing.Schedule:
        """The idle-capacity price low-priority jobs pay (an operator's catalog entry)."""
        if sku not in self.idle:
            self.preload(set(), {sku})
        if self.idle[sku] is None:
            raise pricing.PricingError(f"No idle-capacity price for {sku}.")
        return self.idle[sku]

    def spot_schedule(self, sku: str) -> pricing.Schedule:
        if sku not in self.spot:
            self.preload({sku}, set())
        return self.spot[sku]


class Ledger:
    """Charges being built, keyed by what makes a line item distinct, written out (to
    ``write``) whenever the caller knows no more will be added to them."""

    def __init__(self, write, result: Result):
        self.rows: dict[tuple, list] = {}
        self.write, self.result = write, result

    def add(self, key, meta: Meta, region: str, consumed: int, priced: int, billed_ps, list_ps, unit, list_unit, note=""):
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [meta, region, 0, 0, Decimal(0), Decimal(0), unit, list_unit, note]
        row[2] += consumed
        row[3] += priced
        row[4] += billed_ps
        row[5] += list_ps
        if note and not row[8]:
            row[8] = note

    def flush(self) -> None:
        write, whole_cents, months = self.write, pricing.whole_cents, self.result.months
        for (day, instance_id, charge_type, category, reservation_id, _unit), row in self.rows.items():
            meta, region, consumed, priced, billed_ps, list_ps, unit, list_unit, note = row
            month = date(day.year, day.month, 1)
            months.add((meta.team_id, month))
            write((
                meta.team_id, instance_id, reservation_id, meta.gpu_model_id, meta.sku, region, month, day,
                day + pricing.DAY, charge_type, category, consumed, priced, unit, list_unit,
                whole_cents(list_ps), whole_cents(billed_ps), note,
            ))
        self.result.charges += len(self.rows)
        self.rows.clear()


def meter(start: datetime, end: datetime, *, now: datetime) -> Result:
    """Rebuild usage records and charges for every UTC day touching [start, end),
    counting usage up to ``now``."""
    day0, day1 = pricing.floor_day(start), pricing.ceil_day(min(end, now))
    result = Result(day0, day1)
    if day1 <= day0:
        return result
    cutoff = min(day1, now)
    _one_at_a_time()
    # Asked before anything here locks a row or writes: rating workers read in a
    # snapshot of this transaction, which would not show them what it had written.
    spread = settings.METER_WORKERS > 1 and snapshot_workers.untouched()
    ids = _candidates(day0, cutoff)
    window = Window(day0, cutoff, Catalog(day0, cutoff), dict(Host.objects.values_list("id", "region__name")),
                    _reservations(day0, cutoff))
    if spread and len(ids) >= settings.METER_WORKERS_FROM:
        return _meter_spread(window, day1, ids, settings.METER_WORKERS, result, now)
    _delete(day0, day1)
    # Everything is read first (the instances held, their events, prices and
    # reservations), so that usage records can stream to the database while they are
    # computed: PostgreSQL stores them on one core while rating runs on another.
    instances = _events(ids, day0, cutoff)
    window.catalog.preload({m.sku for m, _, _ in instances if m.pricing_model == PricingModel.SPOT},
                           {m.sku for m, _, _ in instances if m.pricing_model == PricingModel.IDLE})
    held = Held(now)
    usage: list[tuple] = []
    with bulk.Writer(Charge, CHARGE_COLUMNS) as charges:
        rate_window(window, instances, Ledger(charges.write, result), held, usage)
    result.usage_records = bulk.copy(UsageRecord, USAGE_COLUMNS, usage)
    result.unrated = held.flush()
    return result


METER_LOCK = 0x6D65746572  # "meter"


def _one_at_a_time() -> None:
    """Wait for any other metering run to end. Two runs over the same days (the
    periodic task and an operator's ``manage.py meter``, say) would each delete only
    what was committed and both insert their rows: billed twice. On PostgreSQL an
    advisory lock held until the transaction ends (it writes nothing, so rating
    workers can still be used); SQLite writes one transaction at a time anyway."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [METER_LOCK])


@dataclass
class Window:
    """What rating a window needs besides the instances: read once, before rating."""

    day0: datetime
    cutoff: datetime
    catalog: Catalog
    regions: dict[int, str]
    reservations: dict[tuple[int, int, datetime], list]


def _meter_spread(window: Window, day1: datetime, ids: list[int], n: int, result: Result, now: datetime) -> Result:
    """``meter`` with rating spread over ``n`` worker processes, each reading and
    rating the instances of every n-th team (a team's reservations cover its own GPUs
    only) in a snapshot of this transaction, and sending its charges and usage records
    back encoded for COPY: this process only writes them, as they come."""
    wanted = set(ids)
    lo, hi = (ids[0], ids[-1]) if ids else (0, -1)
    queries = [(_sql(_metas_query(lo, hi, (part, n))), _sql(_events_query(lo, hi, window.day0, window.cutoff, (part, n))))
               for part in range(n)]
    window.catalog.preload_all()
    charges, usage_records = bulk.Encoder(Charge, CHARGE_COLUMNS), bulk.Encoder(UsageRecord, USAGE_COLUMNS)

    def read(part: int, cursor) -> list[tuple[Meta, int, list]]:
        metas_sql, events_sql = queries[part]
        metas = _meta_rows(cursor.execute(*metas_sql).fetchall(), wanted)
        return _grouped(metas, cursor.execute(*events_sql).fetchall(), wanted)

    def work(part: int, instances: list[tuple[Meta, int, list]], send) -> None:
        mine = replace(window, reservations={k: v for k, v in window.reservations.items() if k[0] % n == part})
        rows, done, held, usage = [], Result(window.day0, window.cutoff), Held(now), []

        def write(row: tuple) -> None:
            rows.append(row)
            if len(rows) >= BATCH:
                send("charges", charges.encode(rows))
                rows.clear()

        rate_window(mine, instances, Ledger(write, done), held, usage)
        send("charges", charges.encode(rows))
        send("usage", usage_records.encode(usage))
        send("result", pickle.dumps((done.charges, done.months, len(usage), held.rows)))

    usage_chunks, held, result.workers = [], Held(now), n
    with snapshot_workers.Spread(n, read, work, tags=("charges", "usage", "result")) as workers:
        _delete(window.day0, day1)

        def charge_chunks():
            for tag, payload in workers:
                if tag == "charges":
                    yield payload
                elif tag == "usage":
                    usage_chunks.append(payload)
                else:
                    count, months, usage_count, unrated = pickle.loads(payload)
                    result.charges += count
                    result.months |= months
                    result.usage_records += usage_count
                    held.rows += unrated

        charges.copy(charge_chunks())
    usage_records.copy(usage_chunks)
    result.unrated = held.flush()
    return result


def _sql(queryset) -> tuple[str, list]:
    sql, params = queryset.query.sql_with_params()
    return sql, list(params)


def _delete(day0: datetime, day1: datetime) -> None:
    for model in (UsageRecord, Charge, UnratedUsage):
        model.objects.filter(period_start__gte=day0, period_start__lt=day1).delete()


def rate_window(window: Window, instances: list[tuple[Meta, int, list]], ledger: Ledger, held: Held,
                usage: list[tuple]) -> None:
    """Rate ``instances`` (with every reservation of their teams in ``window``): their
    charges go to ``ledger`` as each instance's are complete, their usage records to
    ``usage``, what cannot be priced to ``held``. Reads nothing: it runs as well in a
    rating worker (``billing.rating_pool``) as here."""
    day0, cutoff, catalog, regions = window.day0, window.cutoff, window.catalog, window.regions
    # Reserved whole-GPU usage by (team, GPU model, day), rated once every instance's
    # usage is known (reservations cover a team's GPUs of a model second by second).
    reserved: dict[tuple[int, int, datetime], list] = defaultdict(list)
    grace = stopping_grace()
    for meta, instance_id, events in instances:
        covered = meta.pricing_model == PricingModel.RESERVED and meta.whole
        team_id, model_id = meta.team_id, meta.gpu_model_id
        for run, host_id in _runs(events, grace):
            region = regions.get(host_id, "")
            for day, s, e in pricing.day_segments(max(run.start, day0), min(run.end or cutoff, cutoff)):
                if e <= s:
                    continue
                usage.append((team_id, instance_id, model_id, meta.sku, meta.pricing_model, region, day, s, e,
                              run.gpus, run.start, run.end, run.preempted))
                if covered:
                    use = pricing.Use(instance_id, s, e, run.gpus, (run.start, instance_id))
                    reserved[(team_id, model_id, day)].append((use, meta, region))
                    continue
                try:
                    _rate(ledger, catalog, instance_id, meta, region, day, s, e, run)
                except pricing.PricingError as exc:
                    held.add(instance_id, meta, day, s, e, run.gpus, str(exc))
        ledger.flush()  # this instance's charges are complete
    _rate_reserved(ledger, catalog, reserved, window.reservations, cutoff, held)


class Held:
    """Usage that could not be rated (a SKU with no price in effect): kept as
    ``UnratedUsage`` for operators, while everything else bills on."""

    def __init__(self, now: datetime):
        self.now, self.rows = now, []

    def add(self, instance_id, meta: Meta, day, s, e, gpus, reason: str) -> None:
        self.rows.append(UnratedUsage(
            team_id=meta.team_id, instance_id=instance_id, sku=meta.sku, pricing_model=meta.pricing_model,
            period_start=day, start=s, end=e, gpus=gpus, reason=reason[:300], found_at=self.now,
        ))

    def flush(self) -> int:
        UnratedUsage.objects.bulk_create(self.rows, batch_size=BATCH)
        return len(self.rows)


def _candidates(start: datetime, cutoff: datetime) -> list[int]:
    """Ids of the instances that may have held GPUs in [start, cutoff), held."""
    return _held(
        Instance.objects.filter(created_at__lt=cutoff)
        .filter(Q(state__in=HOLDING_STATES) | Q(state_changed_at__gte=start))
        .order_by("id")
        .values_list("id", flat=True)
    )


def _held(ids) -> list[int]:
    """The ids a ``values_list("id", flat=True)`` query finds, each row held until the
    transaction ends (on PostgreSQL, FOR KEY SHARE: it can change but not be deleted).
    This is the check the database would otherwise make for every usage record and
    charge referencing the row, made once for all of them, in one statement."""
    if connection.vendor != "postgresql":
        return list(ids)
    sql, params = ids.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} FOR KEY SHARE", params)
        return [row[0] for row in cursor.fetchall()]


def _metas_query(lo: int, hi: int, part: tuple[int, int] | None = None):
    """The billing facts of the instances with ids in [lo, hi] (of the teams whose id
    is ``part[0]`` modulo ``part[1]``, where given)."""
    rows = Instance.objects.filter(id__gte=lo, id__lte=hi)
    if part:
        rows = rows.annotate(part=Mod("team_id", Value(part[1]))).filter(part=part[0])
    return rows.values_list(
        "id", "team_id", "gpu_model_id", "gpu_model__name", "slice_profile__kind", "slice_profile__name",
        "pricing_model", "max_price",
    )


def _meta_rows(rows, wanted: set[int]) -> dict[int, Meta]:
    metas = {}
    for pk, team_id, model_id, model, kind, profile, pricing_model, max_price in rows:
        if pk in wanted:
            sku = f"{model}:{kind}:{profile}" if kind else model
            metas[pk] = Meta(team_id, model_id, sku, pricing_model, whole=not kind, max_price=max_price)
    return metas


def _events_query(lo: int, hi: int, start: datetime, cutoff: datetime, part: tuple[int, int] | None = None):
    """The lifecycle events of the instances with ids in [lo, hi] that may have held
    GPUs in [start, cutoff), in order (their times as text, see ``_utc``)."""
    rows = (
        LifecycleEvent.objects.filter(instance_id__gte=lo, instance_id__lte=hi, instance__created_at__lt=cutoff)
        .filter(Q(instance__state__in=HOLDING_STATES) | Q(instance__state_changed_at__gte=start))
    )
    if part:
        rows = rows.annotate(part=Mod("instance__team_id", Value(part[1]))).filter(part=part[0])
    return (
        rows.order_by("instance_id", "time", "id")
        .annotate(time_text=_as_text("time"))
        .values_list("instance_id", "time_text", "to_state", "gpu_count", "by_platform", "host_id")
    )


def _events(ids: list[int], start: datetime, cutoff: datetime) -> list[tuple[Meta, int, list]]:
    """(its billing facts, instance id, its events in order) per candidate. The
    candidates are read by their range of ids (a list of thousands of ids costs more to
    send than the rows), restricted to the candidates."""
    if not ids:
        return []
    lo, hi, wanted = ids[0], ids[-1], set(ids)
    metas = _meta_rows(_metas_query(lo, hi), wanted)
    return _grouped(metas, bulk.fetch(_events_query(lo, hi, start, cutoff)), wanted)


def _grouped(metas: dict[int, Meta], rows, wanted: set[int]) -> list[tuple[Meta, int, list]]:
    out, current, events = [], None, []
    for instance_id, time, to_state, gpus, by_platform, host_id in rows:
        if instance_id != current:
            if events:
                out.append((metas[current], current, events))
            current, events = instance_id, []
        if instance_id in wanted:  # one that became a candidate since the list was made waits for the next run
            events.append((_utc(time), to_state, gpus, by_platform, host_id))
    if events:
        out.append((metas[current], current, events))
    return out


def _runs(events: list, grace) -> list[tuple[pricing.Run, int | None]]:
    runs = pricing.runs_from_events((e[:4] for e in events), grace)
    hosts = {}
    for time, to_state, _count, _platform, host_id in events:
        if to_state in pricing.BILLABLE_STATES:
            hosts.setdefault(time, host_id)
    return [(run, hosts.get(run.start)) for run in runs]


def _rate(ledger: Ledger, catalog: Catalog, instance_id, meta: Meta, region, day, s, e, run: pricing.Run) -> None:
    """On-demand (and reserved slices) at list price; spot at the spot price each second,
    capped at the instance's max price."""
    g = run.gpus
    list_pieces = catalog.list_schedule(meta.sku).pieces(s, e)
    if meta.pricing_model == PricingModel.SPOT:
        free = run.free_spot()
        spot_ps = pricing.price_seconds(pricing.capped(catalog.spot_schedule(meta.sku).pieces(s, e), meta.max_price), g)
        used = pricing.seconds(s, e) * g
        key = (day, instance_id, ChargeType.USAGE, PricingCategory.DYNAMIC, None, "free" if free else "spot")
        ledger.add(
            key, meta, region, used, used, Decimal(0) if free else spot_ps, pricing.price_seconds(list_pieces, g),
            Decimal(0) if free else None, list_pieces[0][2], FREE_NOTE if free else "",
        )
        return
    if meta.pricing_model == PricingModel.IDLE:
        _rate_idle(ledger, catalog, instance_id, meta, region, day, s, e, g, list_pieces)
        return
    topup = run.minimum_topup() * g if s == run.start else 0
    note = SLICE_NOTE if meta.pricing_model == PricingModel.RESERVED else ""
    for i, (ps, pe, price) in enumerate(list_pieces):
        used = pricing.seconds(ps, pe) * g
        extra = topup if i == 0 else 0
        key = (day, instance_id, ChargeType.USAGE, PricingCategory.STANDARD, None, price)
        ledger.add(
            key, meta, region, used, used + extra, price * (used + extra), price * (used + extra), price, price,
            MINIMUM_NOTE if extra else note,
        )


def _rate_idle(ledger: Ledger, catalog: Catalog, instance_id, meta: Meta, region, day, s, e, g, list_pieces) -> None:
    """A low-priority job in idle capacity: per second at the idle-capacity price in
    effect, no minimum; its list price is the on-demand one."""
    for ps, pe, price in catalog.idle_schedule(meta.sku).pieces(s, e):
        used = pricing.seconds(ps, pe) * g
        listed = pricing.price_seconds(catalog.list_schedule(meta.sku).pieces(ps, pe), g)
        key = (day, instance_id, ChargeType.USAGE, PricingCategory.DYNAMIC, None, f"idle {price}")
        ledger.add(key, meta, region, used, used, price * used, listed, price, list_pieces[0][2], IDLE_NOTE)


def _reservations(day0: datetime, cutoff: datetime) -> dict[tuple[int, int, datetime], list]:
    """{(team, GPU model, day): [(reservation, start, end), …]} for the reservations in
    force in the window, held."""
    reservations = defaultdict(list)
    in_force = Reservation.objects.filter(start__lt=cutoff, end__gt=day0)
    held_ids = _held(in_force.order_by("id").values_list("id", flat=True))
    for r in in_force.filter(id__in=held_ids).select_related("gpu_model"):
        for day, s, e in pricing.day_segments(max(r.start, day0), min(r.end, cutoff)):
            reservations[(r.team_id, r.gpu_model_id, day)].append((r, s, e))
    return reservations


def _rate_reserved(ledger: Ledger, catalog: Catalog, reserved: dict, reservations: dict, cutoff: datetime,
                   held: Held) -> None:
    """Per team, GPU model and day: commitments cover reserved instances' GPUs second by
    second; the rest is on-demand, and what no instance used is unused commitment."""
    for group in sorted(reserved, key=lambda k: (k[2], k[0], k[1])):
        entries = sorted(reserved[group], key=lambda entry: (entry[0].key, entry[0].start))
        entries = _priced(entries, catalog, group[2], held)
        _cover(ledger, catalog, group, entries, reservations.get(group, []), cutoff)
        ledger.flush()
    for group in sorted(set(reservations) - set(reserved), key=lambda k: (k[2], k[0], k[1])):
        _cover(ledger, catalog, group, [], reservations[group], cutoff)
        ledger.flush()


def _priced(entries: list, catalog: Catalog, day: datetime, held: Held) -> list:
    """The entries whose SKU has a list price over their whole stretch; the others are
    held (a reservation's price is fixed, but its list price and any overflow are not)."""
    out = []
    for use, meta, region in entries:
        try:
            catalog.list_schedule(meta.sku).pieces(use.start, use.end)
        except pricing.PricingError as exc:
            held.add(use.key, meta, day, use.start, use.end, use.gpus, str(exc))
            continue
        out.append((use, meta, region))
    return out


def _cover(ledger: Ledger, catalog: Catalog, group, entries: list, held: list, cutoff: datetime) -> None:
    team_id, model_id, day = group
    commitments = [pricing.Commitment(r.pk, s, e, r.gpu_count) for r, s, e in held]
    by_key = {r.pk: r for r, _, _ in held}
    coverage = pricing.allocate([u for u, _, _ in entries], commitments, day, min(day + pricing.DAY, cutoff))
    info = {u.key: (meta, region) for u, meta, region in entries}
    for (instance_id, rkey), pieces in coverage.covered.items():
        meta, region = info[instance_id]
        r = by_key[rkey]
        schedule = catalog.list_schedule(meta.sku)
        for s, e, gpus in pieces:
            used = pricing.seconds(s, e) * gpus
            list_ps = pricing.price_seconds(schedule.pieces(s, e), gpus)
            key = (day, instance_id, ChargeType.USAGE, PricingCategory.COMMITTED, rkey, r.hourly)
            ledger.add(key, meta, region, used, used, r.hourly * used, list_ps, r.hourly, schedule.at(s))
    for instance_id, pieces in coverage.overflow.items():
        meta, region = info[instance_id]
        for s, e, gpus in pieces:
            for ps, pe, price in catalog.list_schedule(meta.sku).pieces(s, e):
                used = pricing.seconds(ps, pe) * gpus
                key = (day, instance_id, ChargeType.USAGE, PricingCategory.STANDARD, None, price)
                ledger.add(key, meta, region, used, used, price * used, price * used, price, price, OVERFLOW_NOTE)
    for rkey, unused in coverage.unused.items():
        if not unused:
            continue
        r = by_key[rkey]
        meta = Meta(team_id, model_id, r.gpu_model.name, PricingModel.RESERVED, True)
        key = (day, None, ChargeType.UNUSED_COMMITMENT, PricingCategory.COMMITTED, rkey, r.hourly)
        # The commitment's own price is its list price: nothing was consumed.
        ledger.add(key, meta, "", 0, unused, r.hourly * unused, r.hourly * unused, r.hourly, r.hourly)
