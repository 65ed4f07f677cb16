"""Storage tiers: 1-minute and 1-hour rollups built from raw samples, and retention.

A rollup run rebuilds whole buckets (delete, then insert, in one transaction), so
running it twice changes nothing. A cursor per tier records how far the buckets are
built; a run starts there (or earlier, where late samples made buckets dirty) and
builds at most a bounded number of buckets, so after downtime it catches up over a
few runs instead of one long one.

1-minute buckets: min/avg/max of each gauge, the increase of each counter, the
largest ECC counts, the sample count and the seconds the samples cover. 1-hour
buckets take min/avg/max from the raw samples (exact, not averages of averages) and
the sums (seconds observed, seconds idle, counter increases) from the 1-minute buckets.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Count, Max, Min, Sum
from django.db.models.functions import Trunc
from django.utils import timezone

from . import activity, partitions
from .catalog import COUNTERS, GAUGES, STATES
from .models import GpuEvent, Rollup1h, Rollup1m, RollupCursor, Sample

TIERS = {"1m": (Rollup1m, timedelta(minutes=1), "minute"), "1h": (Rollup1h, timedelta(hours=1), "hour")}
KEYS = ("gpu_id", "slice_id", "instance_id", "team_id")


def setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def floor(moment: datetime, size: timedelta) -> datetime:
    seconds = int(size.total_seconds())
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


# --- building buckets ------------------------------------------------------------------


def _raw_buckets(start: datetime, end: datetime, unit: str) -> list[dict]:
    aggregates = {"n": Count("id"), "first": Min("time"), "last": Max("time")}
    for name in GAUGES:
        aggregates |= {f"{name}_min": Min(name), f"{name}_avg": Avg(name), f"{name}_max": Max(name)}
    for name in COUNTERS:
        aggregates |= {f"{name}_lo": Min(name), f"{name}_hi": Max(name)}
    for name in STATES:
        aggregates[f"{name}_max"] = Max(name)
    rows = (
        Sample.objects.filter(time__gte=start, time__lt=end)
        .annotate(b=Trunc("time", unit, tzinfo=UTC))
        .values("b", *KEYS)
        .annotate(**aggregates)
        .order_by("b")
    )
    return list(rows)


def _observed(row: dict, size: timedelta) -> float:
    """Seconds of the bucket the samples cover: n samples span n intervals."""
    n, span = row["n"], (row["last"] - row["first"]).total_seconds()
    covered = span * n / (n - 1) if n > 1 and span > 0 else 1.0
    return min(size.total_seconds(), covered)


def _gauges(row: dict) -> dict:
    return {f"{name}_{stat}": row[f"{name}_{stat}"] for name in GAUGES for stat in ("min", "avg", "max")}


def build_1m(start: datetime, end: datetime, *, now: datetime | None = None) -> int:
    """Rebuild the 1-minute buckets in [start, end); returns how many rows."""
    size = TIERS["1m"][1]
    rows = _raw_buckets(start, end, "minute")
    last = _previous_counters(start)
    out = []
    for row in rows:
        device = (row["gpu_id"], row["slice_id"])
        before = last.setdefault(device, {})
        counters = {}
        for name in COUNTERS:
            lo, hi = row[f"{name}_lo"], row[f"{name}_hi"]
            if hi is None:
                continue
            prev = before.get(name)
            # A counter that went down was reset: count from the bucket's own start.
            counters[f"{name}_delta"] = hi - prev if prev is not None and prev <= hi else hi - lo
            counters[f"{name}_last"] = before[name] = hi
        out.append(Rollup1m(
            bucket=row["b"], samples=row["n"], observed_s=_observed(row, size),
            **{k: row[k] for k in KEYS}, **_gauges(row), **counters,
            **{f"{n}_max": row[f"{n}_max"] for n in STATES},
        ))
    with transaction.atomic():
        out = _replace(Rollup1m, start, end, out, now=now)
        partitions.ensure_rows("monitoring_rollup1m", {r.bucket for r in out})
        Rollup1m.objects.bulk_create(out, batch_size=500)
    return len(out)


def _previous_counters(start: datetime) -> dict[tuple, dict]:
    """The last counter values of the minute before ``start``, per device."""
    prior = Rollup1m.objects.filter(bucket=start - TIERS["1m"][1]).values(
        "gpu_id", "slice_id", *(f"{n}_last" for n in COUNTERS)
    )
    out: dict[tuple, dict] = {}
    for row in prior:
        device = out.setdefault((row["gpu_id"], row["slice_id"]), {})
        for name in COUNTERS:
            if row[f"{name}_last"] is not None:
                device[name] = max(device.get(name, 0), row[f"{name}_last"])
    return out


def build_1h(start: datetime, end: datetime, *, now: datetime | None = None) -> int:
    """Rebuild the 1-hour buckets in [start, end) from raw samples and 1-minute sums:
    seconds observed, with a reading of activity and idle (``activity``'s rules at
    ``IDLE_BELOW_PCT``), and counter increases. A device-hour with minutes but no raw samples left takes its
    gauges from the minutes too (min of minimums, mean of averages, max of maximums)."""
    rows = _raw_buckets(start, end, "hour")
    minute_sums = {"observed": Sum("observed_s"), "judged": Sum(activity.judged_seconds()),
                   "idle": Sum(activity.idle_seconds(activity.IDLE_BELOW_PCT))}
    for name in COUNTERS:
        minute_sums |= {f"{name}_delta": Sum(f"{name}_delta"), f"{name}_last": Max(f"{name}_last")}
    minutes = activity.judged(Rollup1m.objects.filter(bucket__gte=start, bucket__lt=end)).annotate(
        b=Trunc("bucket", "hour", tzinfo=UTC)).values("b", *KEYS)
    sums = {(m["b"], *(m[k] for k in KEYS)): m for m in minutes.annotate(**minute_sums)}
    raw = {(row["b"], *(row[k] for k in KEYS)) for row in rows}
    if set(sums) - raw:
        rows += [row | {"n": row["samples"]} for row in minutes.annotate(**_minute_gauges())
                 if (row["b"], *(row[k] for k in KEYS)) not in raw]
    out = []
    for row in rows:
        m = sums.get((row["b"], *(row[k] for k in KEYS)), {})
        out.append(Rollup1h(
            bucket=row["b"], samples=row["n"], judged_s=m.get("judged"), idle_s=m.get("idle"),
            observed_s=m.get("observed") or (_observed(row, TIERS["1h"][1]) if "first" in row else 0.0),
            **{k: row[k] for k in KEYS}, **_gauges(row),
            **{f"{n}_delta": m.get(f"{n}_delta") for n in COUNTERS},
            **{f"{n}_last": m.get(f"{n}_last", row.get(f"{n}_hi")) for n in COUNTERS},
            **{f"{n}_max": row[f"{n}_max"] for n in STATES},
        ))
    with transaction.atomic():
        out = _replace(Rollup1h, start, end, out, now=now, update=("observed_s", "judged_s", "idle_s",
                       *(f"{n}_delta" for n in COUNTERS), *(f"{n}_last" for n in COUNTERS)))
        Rollup1h.objects.bulk_create(out, batch_size=500)
    return len(out)


def _minute_gauges() -> dict:
    """An hour's gauges, ECC maxima and sample count from its 1-minute rollups."""
    out = {"samples": Sum("samples")}
    for name in GAUGES:
        out |= {f"{name}_min": Min(f"{name}_min"), f"{name}_avg": Avg(f"{name}_avg"), f"{name}_max": Max(f"{name}_max")}
    return out | {f"{name}_max": Max(f"{name}_max") for name in STATES}


def _replace(model, start: datetime, end: datetime, out: list, *, now: datetime | None,
             update: tuple[str, ...] = ()) -> list:
    """Clear the buckets of [start, end) that ``out`` rebuilds; returns what to insert.

    Before the raw retention horizon other GPUs' samples may already be gone, so a
    rebuild there (late samples, e.g. a spool replayed after days offline) only adds the
    rows a device has none of for its holder then, and leaves every built row as it is,
    but for the fields named in ``update``: those come whole from the tier below (an
    hour's sums of its minutes), so a built row takes them from ``out`` where its
    minutes cover at least what it did (minutes past their own retention are gone)."""
    horizon = (now or timezone.now()) - timedelta(hours=setting("RAW_RETENTION_HOURS", 48))
    stale = model.objects.filter(bucket__gte=start, bucket__lt=end)
    if start >= horizon:
        stale.delete()
        return out
    built = {(bucket, gpu, piece, instance): (pk, observed) for pk, bucket, gpu, piece, instance, observed
             in stale.values_list("pk", "bucket", "gpu_id", "slice_id", "instance_id", "observed_s")}
    keep, again = [], []
    for row in out:
        found = built.get((row.bucket, row.gpu_id, row.slice_id, row.instance_id))
        if found is None:
            keep.append(row)
        elif update and row.observed_s >= found[1]:
            row.pk = found[0]
            again.append(row)
    if again:
        model.objects.bulk_update(again, update, batch_size=500)
    return keep


BUILDERS = {"1m": build_1m, "1h": build_1h}


# --- the periodic runs ---------------------------------------------------------------------


def run(tier: str, *, now: datetime | None = None, max_buckets: int | None = None) -> int:
    """Build the next buckets of ``tier`` that are complete; returns how many buckets.

    Buckets close ``ROLLUP_DELAY_S`` (default 30 s) after their end, so samples on
    their way are in. The 1-hour tier never passes the 1-minute tier.
    """
    model, size, _ = TIERS[tier]
    now = now or timezone.now()
    max_buckets = max_buckets or (setting("ROLLUP_MAX_BUCKETS_1M", 180) if tier == "1m" else setting("ROLLUP_MAX_BUCKETS_1H", 48))
    with transaction.atomic():
        cursor, _ = RollupCursor.objects.select_for_update().get_or_create(name=tier)
        start = _start(cursor, size)
        if start is None:
            return 0
        limit = floor(now - timedelta(seconds=setting("ROLLUP_DELAY_S", 30)), size)
        if tier == "1h":
            minute = RollupCursor.objects.filter(name="1m").values_list("done_until", flat=True).first()
            limit = min(limit, floor(minute, size)) if minute else start
        end = min(limit, start + max_buckets * size)
        if end <= start:
            return 0
        BUILDERS[tier](start, end, now=now)
        dirty = cursor.dirty_from
        cursor.dirty_from = end if dirty is not None and cursor.done_until and end < cursor.done_until else None
        cursor.done_until = max(end, cursor.done_until or end)
        if tier == "1h":  # every hour from start on is built with its idle seconds now
            cursor.idle_from = min(start, cursor.idle_from or start)
        cursor.updated_at = now
        cursor.save()
        if tier == "1m" and dirty is not None:
            # The hours over rebuilt minutes are out of date too.
            RollupCursor.objects.filter(name="1h", done_until__gt=start).exclude(
                dirty_from__lte=start
            ).update(dirty_from=start)
    return round((end - start) / size)


def _start(cursor: RollupCursor, size: timedelta) -> datetime | None:
    if cursor.dirty_from is not None:
        return floor(cursor.dirty_from, size)
    if cursor.done_until is not None:
        return cursor.done_until
    oldest = Sample.objects.order_by("time").values_list("time", flat=True).first()
    return floor(oldest, size) if oldest else None


# --- retention -------------------------------------------------------------------------------


def expire(*, now: datetime | None = None, max_hours: int = 24) -> dict[str, int]:
    """Remove what is past retention.

    Raw samples go after ``RAW_RETENTION_HOURS`` (default 48) but never before the
    1-hour rollup has covered them (late samples that made rollups dirty included);
    1-minute rollups after ``ROLLUP_1M_RETENTION_DAYS`` (30), 1-hour rollups after
    ``ROLLUP_1H_RETENTION_DAYS`` (400), GPU events after ``GPU_EVENT_RETENTION_DAYS`` (90).

    On PostgreSQL raw samples and 1-minute rollups leave a whole day partition at a
    time (counted in ``raw_days`` and ``1m_days``; a day goes once all of it is past
    retention); elsewhere rows are deleted, at most ``max_hours`` of raw samples per run.
    """
    now = now or timezone.now()
    partitions.maintain(now=now)  # rows waiting in a default partition get their day first
    cutoff = _raw_cutoff(now)
    removed = {"raw": 0, "raw_days": 0, "1m": 0, "1m_days": 0}
    if cutoff is not None and partitions.partitioned("monitoring_sample"):
        removed["raw_days"] = len(partitions.drop_before("monitoring_sample", cutoff))
    elif cutoff is not None:
        removed["raw"] = _delete_raw(cutoff, max_hours)
    minute_cutoff = now - timedelta(days=setting("ROLLUP_1M_RETENTION_DAYS", 30))
    if partitions.partitioned("monitoring_rollup1m"):
        removed["1m_days"] = len(partitions.drop_before("monitoring_rollup1m", minute_cutoff))
    else:
        removed["1m"] = Rollup1m.objects.filter(bucket__lt=minute_cutoff).delete()[0]
    removed["1h"] = Rollup1h.objects.filter(
        bucket__lt=now - timedelta(days=setting("ROLLUP_1H_RETENTION_DAYS", 400))
    ).delete()[0]
    removed["events"] = GpuEvent.objects.filter(
        time__lt=now - timedelta(days=setting("GPU_EVENT_RETENTION_DAYS", 90))
    ).delete()[0]
    return removed


def _raw_cutoff(now: datetime) -> datetime | None:
    """Raw samples before this moment may go: past retention, and rolled up into
    hours with no rebuild pending."""
    cutoff = now - timedelta(hours=setting("RAW_RETENTION_HOURS", 48))
    marks = list(RollupCursor.objects.filter(name__in=("1m", "1h")).values_list("name", "done_until", "dirty_from"))
    built = next((done for name, done, _ in marks if name == "1h"), None)
    if built is None:
        return None
    pending = [dirty for _, _, dirty in marks if dirty is not None]
    return min([cutoff, built, *pending])


def _delete_raw(cutoff: datetime, max_hours: int) -> int:
    removed = 0
    oldest = Sample.objects.order_by("time").values_list("time", flat=True).first()
    step = timedelta(hours=1)
    for _ in range(max_hours):
        if oldest is None or oldest >= cutoff:
            break
        upto = min(cutoff, floor(oldest, step) + step)
        removed += Sample.objects.filter(time__lt=upto).delete()[0]
        oldest = upto if upto < cutoff else None
    return removed
