"""Rightsizing: what an instance really used over the last days, and the smaller shape
that would have held it.

Usage comes from the 1-minute rollups of the instance's devices: memory (peak of each
minute's maximum, and the 95th percentile of its averages), real activity (the largest
of SM occupancy, tensor activity and DRAM bandwidth where the GPU reports them, else
utilization: ``monitoring.activity``) and tensor activity. A shape fits when it holds
the peak memory with HEADROOM to spare and its compute covers the 95th-percentile
activity with the same headroom. Prices are not read here: ``services`` asks billing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from django.db.models import TextField
from django.db.models.functions import Cast

from monitoring.activity import real_activity
from monitoring.flops import PEAK_TFLOPS, family
from monitoring.models import Rollup1m

GIB = 2**30
HEADROOM = 1.2  # 20% above the observed peak memory and p95 compute
IDLE_PCT = 5.0  # real activity below this in a minute: idle
MIN_MINUTES = 60  # less telemetry than an hour: no advice


@dataclass(frozen=True)
class Usage:
    """One instance's devices over the window (memory in bytes, activity in percent)."""

    minutes: int  # with a reading of real activity: fewer than MIN_MINUTES, no advice
    devices: int
    mem_peak: float  # the largest device's peak
    mem_p95: float
    total_mem_peak: float  # all devices together, minute by minute
    activity_p95: float  # the busiest device, minute by minute
    busy_gpus_p95: float  # Σ real activity / 100 over the devices, minute by minute
    tensor_avg: float | None
    tensor_p95: float | None
    idle_share: float  # of minutes with every device idle

    @property
    def idle(self) -> bool:
        return self.activity_p95 < IDLE_PCT


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


_FIELDS = ("bucket", "gpu_id", "slice_id", "mem_used_max", "mem_used_avg", "gpu_util_avg", "sm_occupancy_pct_avg",
           "tensor_active_pct_avg", "dram_bw_util_pct_avg")


def usage_by_instance(instance_ids: list[int], start: datetime, end: datetime) -> dict[int, Usage]:
    """{instance id: Usage} over [start, end) for the instances with telemetry."""
    minutes: dict[int, dict[str, list[tuple]]] = {}
    # A minute is only a key here: read as the database's text, not made a datetime
    # (that conversion was most of the time on SQLite, a week of minutes a device).
    rows = (Rollup1m.objects.filter(instance_id__in=instance_ids, bucket__gte=start, bucket__lt=end)
            .annotate(minute=Cast("bucket", TextField())))
    for iid, minute, *row in rows.values_list("instance_id", "minute", *_FIELDS[1:]).iterator(chunk_size=5000):
        minutes.setdefault(iid, {}).setdefault(minute, []).append(tuple(row))
    return {iid: summarise(by_minute) for iid, by_minute in minutes.items()}


def summarise(by_minute: dict) -> Usage:
    """Usage from {minute: [(gpu, slice, mem max, mem avg, util, sm, tensor, dram), …]}."""
    peaks, avgs, totals, busiest, busy, tensors = [], [], [], [], [], []
    devices, idle = set(), 0
    for rows in by_minute.values():
        acts = []
        for gpu, piece, mem_max, mem_avg, util, sm, tensor, dram in rows:
            devices.add((gpu, piece))
            peaks.append(mem_max or mem_avg or 0.0)
            avgs.append(mem_avg or 0.0)
            activity = real_activity(util, sm, tensor, dram)
            if activity is not None:  # unknown (an A100's MIG slice): neither idle nor busy
                acts.append(activity)
            if tensor is not None:
                tensors.append(tensor)
        totals.append(sum(r[2] or r[3] or 0.0 for r in rows))
        if acts:
            busiest.append(max(acts))
            busy.append(sum(acts) / 100)
            idle += max(acts) < IDLE_PCT
    return Usage(
        minutes=len(busiest), devices=len(devices), mem_peak=max(peaks), mem_p95=percentile(avgs, 95),
        total_mem_peak=max(totals), activity_p95=percentile(busiest, 95), busy_gpus_p95=percentile(busy, 95),
        tensor_avg=sum(tensors) / len(tensors) if tensors else None,
        tensor_p95=percentile(tensors, 95) if tensors else None, idle_share=idle / len(busiest) if busiest else 0.0,
    )


# --- shapes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What an instance could be: a SKU (a model, or a model's slice) and a count."""

    sku: str
    count: int
    memory_gb: float  # per device
    compute: float  # per device, as a share of one GPU of the instance's own model
    label: str


def slice_compute(kind: str, name: str, slices_per_gpu: int) -> float:
    """A MIG profile's share of the GPU's compute ("3g.40gb": 3 of 7); a vGPU's
    time-sliced share when every slice is busy (1 of its slices per GPU)."""
    match = re.match(r"(\d)g\.", name)
    if kind == "mig" and match:
        return int(match.group(1)) / 7
    return 1 / max(1, slices_per_gpu)


def fits(usage: Usage, shape: Shape) -> bool:
    """Peak memory and p95 compute, with headroom, inside the shape."""
    per_device_mem = max(usage.mem_peak, usage.total_mem_peak / shape.count)
    compute_need = max(usage.busy_gpus_p95 / shape.count, usage.activity_p95 / 100 if shape.count == 1 else 0)
    return per_device_mem * HEADROOM <= shape.memory_gb * GIB and compute_need * HEADROOM <= shape.compute


def gpus_needed(usage: Usage, memory_gb: float, compute: float = 1.0) -> int:
    """The fewest whole GPUs (each ``memory_gb``, ``compute`` of the instance's own GPU)
    that hold the peak memory and the p95 compute, with headroom."""
    by_memory = math.ceil(usage.total_mem_peak * HEADROOM / (memory_gb * GIB))
    by_compute = math.ceil(usage.busy_gpus_p95 * HEADROOM / compute)
    return max(1, by_memory, by_compute)


def fewer_gpus(usage: Usage, count: int, memory_gb: float) -> int | None:
    """``gpus_needed`` of the same model, where that is fewer than ``count``."""
    need = gpus_needed(usage, memory_gb)
    return need if need < count else None


def relative_compute(model_name: str, other_name: str, precision: str) -> float | None:
    """Another model's dense tensor peak as a share of this model's (same precision)."""
    mine, theirs = family(model_name), family(other_name)
    if mine is None or theirs is None:
        return None
    a, b = PEAK_TFLOPS[mine].get(precision), PEAK_TFLOPS[theirs].get(precision)
    return None if not a or not b else b / a
