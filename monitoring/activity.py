"""How busy allocated GPUs really are, for billing's idle cost and for pages.

"Utilization" from NVML is the share of time any kernel ran, not how much of the
GPU it used: a memory copy reads 100% with no tensor work, a job that holds 100 GB
and computes nothing reads ~0%. So where the GPU reports Hopper GPM metrics, real
activity is the largest of SM occupancy, tensor-core activity and DRAM bandwidth
use (a memory-bound copy is real work); elsewhere it is plain GPU utilization.
A GPU-minute is idle when its real activity is below the threshold (10%,
``IDLE_BELOW_PCT``, for every figure the product shows). Observed seconds are those
with a reading of real activity: a device that reports neither utilization nor GPM
(an A100's MIG slice: NVML has no utilization on MIG devices, and GPM begins with
Hopper) is not observed at all, so its idle share is unknown rather than zero.

Each 1-hour rollup carries the observed and idle seconds of its minutes
(``Rollup1h.judged_s`` and ``idle_s``, summed when the hour is built). So over the
whole hours the 1-hour tier has built with them, idle and observed seconds are read
from the hours: a month of a team's GPUs is 60× fewer rows than its minutes, the same
sums, and unchanged once the minutes are past retention. The hours not built yet (the
current one, and any being rebuilt after late samples) and the minutes cut by the range
are read from the 1-minute rollups. An hour with no minute rollups (past the 1-minute
tier's retention, ROLLUP_1M_RETENTION_DAYS) counts the sums it stored, or, built before
hours stored them, is judged by its average.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import Case, DateTimeField, F, FloatField, Func, Q, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from instances.models import Gpu

from . import readings
from .models import GpuLatest, Rollup1h, Rollup1m, RollupCursor, stale_after_s

BUCKET = timedelta(minutes=1)
HOUR = timedelta(hours=1)
IDLE_BELOW_PCT = 10.0
ACTIVITY = ("gpu_util_avg", "sm_occupancy_pct_avg", "tensor_active_pct_avg", "dram_bw_util_pct_avg")


def real_activity(gpu_util, sm_occupancy=None, tensor_active=None, dram_bw=None) -> float | None:
    """Percent of real work; None when the GPU reported nothing to judge by."""
    gpm = [v for v in (sm_occupancy, tensor_active, dram_bw) if v is not None]
    if gpm:
        return max(gpm)
    return gpu_util


def activity_by_instance(
    instance_ids: list[int], start: datetime, end: datetime, *, threshold_pct: float = IDLE_BELOW_PCT
) -> dict[int, tuple[int, int]]:
    """{instance id: (observed GPU-seconds, idle GPU-seconds)} over [start, end).

    Read from the 1-minute rollups; a minute cut by ``start`` or ``end`` counts for the
    part inside. Instances with no telemetry answer (0, 0).
    """
    totals = {iid: [0.0, 0.0] for iid in instance_ids}
    for iid, _gpu, _hour, seconds, idle in _observed(instance_ids, start, end, threshold_pct):
        totals[iid][0] += seconds
        totals[iid][1] += idle
    return {iid: (round(observed), round(idle)) for iid, (observed, idle) in totals.items()}


def activity_by_instance_and_day(
    instance_ids: list[int], start: datetime, end: datetime, *, threshold_pct: float = IDLE_BELOW_PCT
) -> dict[tuple[datetime, int], tuple[int, int]]:
    """{(UTC day, instance id): (observed GPU-seconds, idle GPU-seconds)} over [start, end),
    read in one pass: for each day, what ``activity_by_instance`` answers over that day's
    part of the range (no rollup straddles midnight). Only days with telemetry appear."""
    totals: dict[tuple[datetime, int], list[float]] = {}
    for iid, _gpu, hour, seconds, idle in _observed(instance_ids, start, end, threshold_pct, by_day=True):
        day = hour.astimezone(UTC).replace(hour=0)
        entry = totals.setdefault((day, iid), [0.0, 0.0])
        entry[0] += seconds
        entry[1] += idle
    return {key: (round(observed), round(idle)) for key, (observed, idle) in totals.items()}


# Real activity in SQL (``real_activity``): the largest GPM metric reported, else
# utilization. A missing GPM metric reads -1, below any percentage, so the largest of
# the three is negative only when none was reported (the same on every database).
_NONE = Value(-1.0)
_GPM = Greatest(*(Coalesce(name, _NONE) for name in ACTIVITY[1:]))


def judged(rows):
    """Rollup rows with their real activity in SQL, as ``idle_seconds`` reads it."""
    return rows.alias(gpm=_GPM)


def judged_seconds() -> Case:
    """The seconds of a ``judged`` rollup that count as observed: all of its seconds
    when it has a reading of real activity, else none."""
    return Case(When(Q(gpm__gte=0) | Q(gpu_util_avg__isnull=False), then=F("observed_s")),
                default=Value(0.0), output_field=FloatField())


def idle_seconds(threshold_pct: float) -> Case:
    """The seconds of a ``judged`` rollup that were idle: all of its observed seconds
    when its real activity is below ``threshold_pct``, else none."""
    below = Value(float(threshold_pct))
    return Case(
        When(Q(gpm__gte=0, gpm__lt=below) | Q(gpm__lt=0, gpu_util_avg__lt=below), then=F("observed_s")),
        default=Value(0.0), output_field=FloatField(),
    )


class _Hour(Func):
    """The hour a bucket falls in, by the database's own function: Django's
    ``TruncHour`` is a Python function called per row on SQLite."""

    output_field = DateTimeField()
    unit, sqlite_format = "hour", "%%%%Y-%%%%m-%%%%d %%%%H:00:00"

    def as_sql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, template=f"date_trunc('{self.unit}', %(expressions)s, 'UTC')",
                              **extra)

    def as_sqlite(self, compiler, connection, **extra):  # buckets are stored as UTC text there
        return super().as_sql(compiler, connection, template=f"strftime('{self.sqlite_format}', %(expressions)s)",
                              **extra)


class _Day(_Hour):
    """The UTC day a bucket falls in."""

    unit, sqlite_format = "day", "%%%%Y-%%%%m-%%%%d 00:00:00"


def exact_hours(start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    """The whole hours inside [start, end) whose 1-hour rollups carry the observed and
    idle seconds of all their minutes: built by the 1-hour tier since it sums them (``idle_from``),
    and not waiting for a rebuild after late samples (``dirty_from``). None if no hour."""
    mark = RollupCursor.objects.filter(name="1h").values_list("idle_from", "done_until", "dirty_from").first()
    if mark is None or mark[0] is None or mark[1] is None:
        return None
    idle_from, done, dirty = mark
    lo = max(idle_from, _ceil_hour(start))
    hi = min(done, _floor_hour(dirty or done), _floor_hour(end))
    return (lo, hi) if lo < hi else None


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil_hour(moment: datetime) -> datetime:
    floor = _floor_hour(moment)
    return floor if floor == moment else floor + HOUR


def _observed(instance_ids, start: datetime, end: datetime, threshold_pct: float, *, by_day: bool = False):
    """(instance id, GPU id, time, seconds observed inside [start, end), of which idle):
    over ``exact_hours`` from the 1-hour rollups, elsewhere from the minutes
    (``_from_minutes``). With ``by_day``, each row's time (an hour, or a midnight for
    the hours summed by day) lies in the UTC day it counts for; without it, some rows
    are sums over several days and their time is None."""
    ids = list(instance_ids)
    exact = exact_hours(start, end) if threshold_pct == IDLE_BELOW_PCT else None
    if exact is None:
        yield from _from_minutes(ids, start, end, threshold_pct, by_day=by_day)
        return
    lo, hi = exact
    if start < lo:
        yield from _from_minutes(ids, start, lo, threshold_pct, by_day=by_day)
    rows = judged(Rollup1h.objects.filter(instance_id__in=ids, bucket__gte=lo, bucket__lt=hi))
    if by_day:  # summed by day here, at its midnight
        rows = rows.annotate(day=_Day("bucket"))
    keys = ["instance_id", "gpu_id", *(["day"] if by_day else [])]
    for row in (rows.values(*keys).order_by()
                .annotate(observed=Sum(Coalesce("judged_s", judged_seconds())),
                          idle=Sum(Coalesce("idle_s", idle_seconds(threshold_pct))))):
        yield row["instance_id"], row["gpu_id"], row.get("day"), row["observed"] or 0.0, row["idle"] or 0.0
    if hi < end:
        yield from _from_minutes(ids, hi, end, threshold_pct, by_day=by_day)


def _from_minutes(ids: list[int], start: datetime, end: datetime, threshold_pct: float, *, by_day: bool):
    """``_observed`` over [start, end) summed over the 1-minute rollups, and over the
    1-hour rollups of device-hours that have no minute rollups. Whole buckets are summed
    by the database, per device-hour; the few cut by ``start`` or ``end`` count in part,
    here. The hour is None for the hours before the first one with minute rollups,
    summed per device, unless ``by_day``."""
    covered: set[tuple] = set()
    for iid, gpu_id, slice_id, hour, observed, idle in _sums(
        Rollup1m.objects.filter(instance_id__in=ids), BUCKET, start, end, threshold_pct, by_hour=True
    ):
        covered.add((iid, gpu_id, slice_id, hour))
        yield iid, gpu_id, hour, observed, idle
    # Minute rollups exist from some hour on (retention): hours before the first
    # covered one need no check, so they are summed per device, not per hour.
    horizon = min((key[3] for key in covered), default=None)
    hours = Rollup1h.objects.filter(instance_id__in=ids)
    before = hours if horizon is None else hours.filter(bucket__lt=horizon)
    for iid, gpu_id, _slice, hour, observed, idle in _sums(before, HOUR, start, end, threshold_pct, by_hour=by_day):
        yield iid, gpu_id, hour, observed, idle
    if horizon is not None:
        for iid, gpu_id, slice_id, hour, observed, idle in _sums(
            hours.filter(bucket__gte=horizon), HOUR, start, end, threshold_pct, by_hour=True
        ):
            if (iid, gpu_id, slice_id, hour) not in covered:
                yield iid, gpu_id, hour, observed, idle


def _sums(rows, width: timedelta, start: datetime, end: datetime, threshold_pct: float, *, by_hour: bool):
    """(instance id, GPU id, slice id, hour or None, observed seconds, idle seconds) of
    the rollups ``rows`` whose buckets (``width`` long) overlap [start, end), grouped by
    device (and by hour). An hour with the sums of its minutes stored (at
    ``IDLE_BELOW_PCT``) counts those; one without is judged by its average."""
    stored = rows.model is Rollup1h and threshold_pct == IDLE_BELOW_PCT
    rows = judged(rows.filter(bucket__gt=start - width, bucket__lt=end))
    whole = Q(bucket__gte=start, bucket__lte=end - width)
    keys = ["instance_id", "gpu_id", "slice_id"]
    observed, idle = judged_seconds(), idle_seconds(threshold_pct)
    if stored:
        observed, idle = Coalesce("judged_s", observed), Coalesce("idle_s", idle)
    grouped = rows.filter(whole).annotate(hour=_Hour("bucket")) if by_hour else rows.filter(whole)
    for row in (grouped.values(*keys, *(["hour"] if by_hour else []))
                .annotate(observed=Sum(observed), idle=Sum(idle)).order_by()):
        yield row["instance_id"], row["gpu_id"], row["slice_id"], row.get("hour"), row["observed"] or 0.0, row["idle"]
    sums = ("judged_s", "idle_s") if stored else ()
    for iid, gpu_id, slice_id, bucket, seconds, *metrics in rows.exclude(whole).values_list(
        *keys, "bucket", "observed_s", *ACTIVITY, *sums
    ):
        inside = (min(end, bucket + width) - max(start, bucket)) / width
        activity = real_activity(*metrics[:len(ACTIVITY)])
        judged_s, idle_s = metrics[len(ACTIVITY):] or (None, None)
        if judged_s is None:
            judged_s = (seconds or 0.0) if activity is not None else 0.0
            idle_s = judged_s if activity is not None and activity < threshold_pct else 0.0
        hour = bucket.replace(minute=0, second=0, microsecond=0) if by_hour else None
        yield iid, gpu_id, slice_id, hour, judged_s * inside, (idle_s or 0.0) * inside


def instance_latest(instance_ids: list[int]) -> dict[int, dict]:
    """{instance id: {"t": newest reading or None, "gpus": [current reading, …]}} (``readings``)."""
    now = timezone.now()
    after = stale_after_s()
    out: dict[int, dict] = {iid: {"t": None, "gpus": []} for iid in instance_ids}
    rows = GpuLatest.objects.filter(instance_id__in=list(instance_ids)).order_by("gpu_id", "slice_id")
    for row in rows.select_related("host", "gpu"):
        entry = out[row.instance_id]
        entry["gpus"].append(readings.of_latest(row, now=now, after_s=after, host=row.host.name, index=row.gpu.index))
        if entry["t"] is None or row.time.isoformat() > entry["t"]:
            entry["t"] = row.time.isoformat()
    return out


def activity_by_gpu(
    instance_ids: list[int], start: datetime, end: datetime, *, threshold_pct: float = IDLE_BELOW_PCT
) -> dict[tuple[int, str], tuple[int, int]]:
    """{(instance id, GPU uuid): (observed seconds, idle seconds)} over [start, end), per
    GPU the instance held: billing's idle cost per GPU (a busy instance can hold an idle
    GPU). Same rules as ``activity_by_instance``."""
    totals: dict[tuple[int, int], list[float]] = {}
    for iid, gpu_id, _hour, seconds, idle in _observed(instance_ids, start, end, threshold_pct):
        entry = totals.setdefault((iid, gpu_id), [0.0, 0.0])
        entry[0] += seconds
        entry[1] += idle
    uuids = dict(Gpu.objects.filter(pk__in={gpu_id for _, gpu_id in totals}).values_list("pk", "uuid"))
    return {(iid, uuids[gpu_id]): (round(observed), round(idle)) for (iid, gpu_id), (observed, idle) in totals.items()}


def pflop_hours_by_instance(instance_ids: list[int], start: datetime, end: datetime) -> dict[int, float]:
    """{instance id: effective PFLOP-hours} over the whole hours of [start, end): the
    achieved-TFLOP/s estimate (flops.py, at the precision each instance had in force at
    the hour's start) of every hour its devices reported tensor activity, times the
    seconds observed. Instances without such telemetry are left out (unknown, not zero)."""
    from instances.precision import spans

    from . import flops
    from .models import Rollup1h

    periods = spans(instance_ids, start, end)
    rows = Rollup1h.objects.filter(
        instance_id__in=instance_ids, bucket__gte=start, bucket__lt=end, tensor_active_pct_avg__isnull=False
    ).values_list("instance_id", "bucket", "gpu__model__name", "slice__profile__name", "slice__profile__kind",
                  "tensor_active_pct_avg", "sm_clock_mhz_avg", "observed_s")
    out: dict[int, float] = {}
    for iid, bucket, model, profile, kind, tensor, clock, observed in rows:
        in_force = [p for p in periods.get(iid, []) if p.start <= bucket] or periods.get(iid, [])[:1]
        precision = in_force[-1].precision if in_force else flops.DEFAULT_PRECISION
        basis = flops.basis(model, precision, share=flops.slice_share(profile, kind))
        tflops = flops.estimate(tensor, clock, basis)
        if tflops is not None:
            out[iid] = out.get(iid, 0.0) + tflops * observed / 3600 / 1000
    return out
