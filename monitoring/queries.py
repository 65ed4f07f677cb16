"""Chart queries: pick the storage tier by range, downsample in the database.

Each series is cut into at most ``max_points`` equal time buckets; every bucket
reports the time of its first reading, the average, and the true minimum and
maximum of what it covers, so a one-sample spike survives any zoom level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Avg, F, FloatField, Func, Max, Min, QuerySet
from django.db.models.functions import Cast, Floor
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from . import flops
from .catalog import CHARTABLE as STORED
from .catalog import COUNTERS, GAUGES, STATES
from .models import Rollup1h, Rollup1m, Sample

# Metrics computed from stored ones when read: name -> the stored metrics it needs.
DERIVED = {"tflops_est": ("tensor_active_pct", "sm_clock_mhz")}
CHARTABLE = STORED + tuple(DERIVED)

MAX_POINTS = 2000
RAW_MAX_RANGE = timedelta(hours=6)
ONE_MINUTE_MAX_RANGE = timedelta(days=7)
MAX_RANGE = timedelta(days=400)
DEFAULT_RANGE = timedelta(hours=1)
# Unix seconds outside these years are a typo, not a time.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


class QueryError(ValueError):
    """A bad query parameter; ``param`` names it."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param
        self.message = message


class Epoch(Func):
    """Seconds since 1970 of a datetime column, as a float."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra):
        return self.as_postgresql(compiler, connection, **extra)

    def as_postgresql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        # Django stores "YYYY-MM-DD HH:MM:SS[.ffffff]" in UTC; julianday() would lose
        # tens of microseconds and move samples across bucket edges.
        template = "(CAST(strftime('%%%%s', %(expressions)s) AS INTEGER) + CAST(substr(%(expressions)s, 20) AS REAL))"
        return super().as_sql(compiler, connection, template=template, **extra)


def parse_time(value: str, param: str) -> datetime:
    """ISO 8601 (a naive time is UTC) or Unix seconds."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        if not math.isfinite(seconds):
            raise QueryError(param, f"{param} must be a finite number of Unix seconds.")
        try:
            moment = datetime.fromtimestamp(seconds, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise QueryError(param, f"{param}={value!r} is out of range.") from None
    else:
        try:
            moment = parse_datetime(text)
        except ValueError:
            moment = None
        if moment is None:
            raise QueryError(param, f"{param}={value!r} is neither ISO 8601 nor Unix seconds.")
        if timezone.is_naive(moment):
            moment = moment.replace(tzinfo=UTC)
    if not EARLIEST <= moment < LATEST:
        raise QueryError(param, f"{param}={value!r} is out of range (years 2000-2199).")
    return moment.astimezone(UTC)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    metrics: tuple[str, ...]
    max_points: int = MAX_POINTS

    @property
    def stored(self) -> tuple[str, ...]:
        """The stored metrics to read: the asked ones, derived ones replaced by their inputs."""
        out = []
        for metric in self.metrics:
            out += DERIVED.get(metric, (metric,))
        return tuple(dict.fromkeys(out))

    @property
    def tier(self) -> str:
        span = self.end - self.start
        if span <= RAW_MAX_RANGE:
            return "raw"
        if span <= ONE_MINUTE_MAX_RANGE:
            return "1m"
        return "1h"


def parse_window(params, *, now: datetime | None = None) -> Window:
    """A Window from query parameters ``metric`` (repeatable), ``start``, ``end``, ``points``."""
    now = now or timezone.now()
    metrics = tuple(dict.fromkeys(_metric_params(params)))
    unknown = [m for m in metrics if m not in CHARTABLE]
    if unknown:
        raise QueryError("metric", f"Unknown metric {unknown[0]!r}. Choose from: {', '.join(CHARTABLE)}.")
    end = parse_time(params["end"], "end") if params.get("end") else now
    start = parse_time(params["start"], "start") if params.get("start") else end - DEFAULT_RANGE
    if start >= end:
        raise QueryError("start", "start must be before end.")
    if end - start > MAX_RANGE:
        raise QueryError("start", f"The range may span at most {MAX_RANGE.days} days.")
    points = MAX_POINTS
    if params.get("points"):
        try:
            points = int(params["points"])
        except ValueError:
            raise QueryError("points", "points must be an integer.") from None
        if not 1 <= points <= MAX_POINTS:
            raise QueryError("points", f"points must be between 1 and {MAX_POINTS}.")
    return Window(start=start, end=end, metrics=metrics or ("gpu_util",), max_points=points)


def _metric_params(params) -> list[str]:
    values = params.getlist("metric") if hasattr(params, "getlist") else params.get("metric", [])
    if isinstance(values, str):
        values = [values]
    out = []
    for value in values:
        out += [v.strip() for v in value.split(",") if v.strip()]
    return out


# --- the queries --------------------------------------------------------------------


def _tier_source(tier: str) -> tuple[type, str]:
    return {"raw": (Sample, "time"), "1m": (Rollup1m, "bucket"), "1h": (Rollup1h, "bucket")}[tier]


def _aggregates(metric: str, tier: str) -> dict:
    """min/avg/max of one metric over a bucket, from the tier's columns."""
    if tier == "raw":
        col = F(metric)
        return {f"{metric}__min": Min(col), f"{metric}__avg": Avg(Cast(col, FloatField())), f"{metric}__max": Max(col)}
    if metric in GAUGES:
        return {
            f"{metric}__min": Min(f"{metric}_min"),
            f"{metric}__avg": Avg(f"{metric}_avg"),
            f"{metric}__max": Max(f"{metric}_max"),
        }
    column = f"{metric}_last" if metric in COUNTERS else f"{metric}_max"
    assert metric in COUNTERS + STATES
    return {f"{metric}__min": Min(column), f"{metric}__avg": Avg(Cast(column, FloatField())), f"{metric}__max": Max(column)}


def bucket_rows(qs: QuerySet, window: Window, *, group: tuple[str, ...] = ()) -> tuple[str, list[dict]]:
    """(tier, rows): one row per (group…, time bucket) with ``t`` and metric__stat keys."""
    tier = window.tier
    model, time_field = _tier_source(tier)
    assert qs.model is model
    width = (window.end - window.start).total_seconds() / window.max_points
    origin = window.start.timestamp()
    aggregates = {}
    for metric in window.stored:
        aggregates |= _aggregates(metric, tier)
    rows = (
        qs.filter(**{f"{time_field}__gte": window.start, f"{time_field}__lt": window.end})
        .annotate(b=Floor((Epoch(time_field) - origin) / width))
        .values(*group, "b")
        .annotate(t=Min(time_field), **aggregates)
        .order_by(*group, "b")
    )
    return tier, list(rows)


Bases = flops.Basis | flops.Timeline | None


def to_series(rows: list[dict], metrics: tuple[str, ...], basis: Bases = None) -> dict:
    """{metric: {"t": [iso…], "avg": […], "min": […], "max": […]}}, skipping empty buckets.
    ``tflops_est`` needs the device's ``basis`` (or the Timeline of its bases: each bucket
    is estimated at the basis in force at its first reading); without one it is empty."""
    out = {}
    for metric in metrics:
        if metric == "tflops_est":
            timeline = basis if isinstance(basis, flops.Timeline) else flops.Timeline.constant(basis)
            out[metric] = _tflops_series(rows, timeline)
            continue
        series = {"t": [], "avg": [], "min": [], "max": []}
        for row in rows:
            avg = row[f"{metric}__avg"]
            if avg is None:
                continue
            series["t"].append(row["t"].astimezone(UTC).isoformat().replace("+00:00", "Z"))
            series["avg"].append(round(avg, 4))
            series["min"].append(row[f"{metric}__min"])
            series["max"].append(row[f"{metric}__max"])
        out[metric] = series
    return out


def _tflops_series(rows: list[dict], timeline: flops.Timeline) -> dict:
    series = {"t": [], "avg": [], "min": [], "max": []}
    for row in rows:
        basis = timeline.at(row["t"].timestamp())
        if basis is None:
            continue
        clock = row["sm_clock_mhz__avg"]
        avg = flops.estimate(row["tensor_active_pct__avg"], clock, basis)
        if avg is None:
            continue
        series["t"].append(row["t"].astimezone(UTC).isoformat().replace("+00:00", "Z"))
        series["avg"].append(avg)
        series["min"].append(flops.estimate(row["tensor_active_pct__min"], clock, basis))
        series["max"].append(flops.estimate(row["tensor_active_pct__max"], clock, basis))
    return series


def scoped(tier: str, user) -> QuerySet:
    """The tier's rows that ``user`` may read: their teams' samples (operators: all)."""
    return _tier_source(tier)[0].objects.for_user(user)


def gpu_series(
    user, window: Window, *, gpu_id: int, slice_id: int | None, basis: Bases = None
) -> tuple[str, dict]:
    """Series of one GPU (``slice_id`` None: the whole GPU), as far as ``user`` may see it."""
    qs = scoped(window.tier, user).filter(gpu_id=gpu_id)
    qs = qs.filter(slice_id=slice_id) if slice_id else qs.filter(slice__isnull=True)
    tier, rows = bucket_rows(qs, window)
    return tier, to_series(rows, window.metrics, basis)


def instance_series(
    user, window: Window, *, instance_id: int, bases: dict[str, Bases] | None = None
) -> tuple[str, dict]:
    """{uuid: series} for every GPU or slice that reported while held by the instance."""
    qs = scoped(window.tier, user).filter(instance_id=instance_id)
    tier, rows = bucket_rows(qs, window, group=("gpu__uuid", "slice__uuid"))
    by_device: dict[str, list[dict]] = {}
    for row in rows:
        by_device.setdefault(row["slice__uuid"] or row["gpu__uuid"], []).append(row)
    bases = bases or {}
    return tier, {
        uuid: to_series(device_rows, window.metrics, bases.get(uuid)) for uuid, device_rows in by_device.items()
    }


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def device_basis(model, precision: str, profile=None, declared: str = "default") -> flops.Basis | None:
    """The TFLOP/s estimate's basis for a GPU of ``model`` (a GpuModel), or a slice of
    ``profile``; None where the model reports no GPM tensor activity to estimate from."""
    if not model.reports_gpm:
        return None
    share = flops.slice_share(profile.name, profile.kind) if profile is not None else 1.0
    return flops.basis(model.name, precision, share=share, declared=declared)


def instance_bases(instance) -> dict[str, flops.Timeline]:
    """{uuid: the Timeline of its bases} of every GPU and slice the instance ever held,
    at the precision in force at each time (instances.precision)."""
    from instances.models import GpuHold
    from instances.precision import spans

    periods = spans([instance.pk])[instance.pk]
    holds = GpuHold.objects.filter(instance=instance).select_related("gpu__model", "slice__profile")
    return {
        (h.slice.uuid if h.slice else h.gpu.uuid): flops.Timeline([
            (p.start.timestamp(), device_basis(h.gpu.model, p.precision, h.slice.profile if h.slice else None,
                                               p.source))
            for p in periods
        ])
        for h in holds
    }


def device_timeline(model, profile, *, gpu_id: int, slice_id: int | None, window: Window) -> flops.Timeline:
    """The bases of one GPU or slice over ``window``: each holder's precision of its time
    while it held the device, the default (bf16, no holder) while none did."""
    from instances.models import GpuHold
    from instances.precision import spans

    free = device_basis(model, flops.DEFAULT_PRECISION, profile, declared="default")
    holds = list(
        GpuHold.objects.filter(gpu_id=gpu_id, slice_id=slice_id, start__lt=window.end)
        .exclude(end__lte=window.start).order_by("start")
    )
    periods = spans({h.instance_id for h in holds}, window.start, window.end)
    steps: list[tuple[float, flops.Basis | None]] = [(float("-inf"), free)]
    for hold in holds:
        for p in periods.get(hold.instance_id, []):
            if p.end is not None and p.end <= hold.start or hold.end is not None and p.start >= hold.end:
                continue
            steps.append((max(p.start, hold.start).timestamp(), device_basis(model, p.precision, profile, p.source)))
        if hold.end is not None:
            steps.append((hold.end.timestamp(), free))
    return flops.Timeline(steps)


def basis_at_end(timeline: flops.Timeline, window: Window) -> flops.Basis | None:
    """The basis of the window's last moment ([start, end): not of ``end`` itself)."""
    return timeline.within(window.start.timestamp(), window.end.timestamp())[-1][1]


def bases_text(timeline: flops.Timeline, window: Window) -> list[dict]:
    """The bases in force during ``window``, each with when it began (clipped to the start)."""
    return [
        {"from": iso(datetime.fromtimestamp(start, UTC)), **(b.as_dict() if b else {"precision": None})}
        for start, b in timeline.within(window.start.timestamp(), window.end.timestamp())
    ]
