"""The overview's figures, aggregated in the database.

Each figure is one aggregate query whatever the fleet holds, so the overview costs
what its screen shows: the totals below, plus the one page of hosts (operators) or
instances (team members) it draws. The overview page and the API
(``/api/v1/overview/``) both read these functions: one definition per figure.

A GPU is *used* when it or any of its slices is held (``gpu_used_q``), *free* when a
whole-GPU launch could take it now (``gpu_free_q``). A reading is
*fresh* while it is at most ``TELEMETRY_STALE_AFTER_S`` old; the mean utilization
is over fresh readings that report one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Avg, Count, FloatField, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from instances.models import (
    HOLDING_STATES,
    Gpu,
    GpuSlice,
    Host,
    Instance,
    State,
    gpu_free_q,
    gpu_used_q,
)

from . import alert_hooks
from .models import AgentState, GpuLatest, Sample, stale_after_s


def _util():
    return Cast(KeyTextTransform("gpu_util", "metrics"), FloatField())


def _mean(value: float | None) -> int | None:
    return None if value is None else round(value)


def fresh_since(now: datetime) -> datetime:
    return now - timedelta(seconds=stale_after_s())


def capacity() -> list[dict]:
    """Used, free and other GPUs per model, by model name: free as the launch form counts
    it (``gpu_free_q``); other: unused but not launchable whole (in MIG/vGPU mode, whose
    slices are offered instead, or on a draining or down host)."""
    rows = (
        Gpu.objects.order_by()
        .values("model__name")
        .annotate(total=Count("id", distinct=True), used=Count("id", filter=gpu_used_q(), distinct=True),
                  free=Count("id", filter=gpu_free_q(), distinct=True))
        .order_by("model__name")
    )
    return [{"model": r["model__name"], "used": r["used"], "free": r["free"],
             "other": r["total"] - r["used"] - r["free"], "total": r["total"]} for r in rows]


def sliced_util(now: datetime, gpu_ids: list[int] | None = None) -> dict[int, float]:
    """{GPU id: its utilization from its slices} for the GPUs (of ``gpu_ids``, or all)
    whose own fresh reading has none: in MIG mode NVML reports no utilization of the
    whole GPU, and each slice's comes with the agent's slower readings (GPM), so it is
    read from the slices' samples of the last two staleness periods, not their latest
    reading. Each slice counts by its share of the GPU (1 / slices per GPU of its
    profile), over the slices that reported."""
    since = now - timedelta(seconds=2 * stale_after_s())
    samples = Sample.objects.filter(time__gt=since, time__lte=now, slice__isnull=False, gpu_util__isnull=False)
    if gpu_ids is not None:
        samples = samples.filter(gpu_id__in=gpu_ids)
    shares: dict[int, list[tuple[float, float]]] = {}
    per_slice = samples.order_by().values("gpu_id", "slice_id", "slice__profile__slices_per_gpu").annotate(
        u=Avg("gpu_util")
    )
    for row in per_slice:
        share = 1.0 / max(1, row["slice__profile__slices_per_gpu"] or 1)
        shares.setdefault(row["gpu_id"], []).append((row["u"], share))
    own = set(
        GpuLatest.objects.filter(slice__isnull=True, last_seen__gte=fresh_since(now), gpu_id__in=list(shares))
        .filter(metrics__has_key="gpu_util").values_list("gpu_id", flat=True)
    )
    return {
        gpu_id: sum(u * w for u, w in rows) / sum(w for _, w in rows)
        for gpu_id, rows in shares.items() if gpu_id not in own
    }


def fleet_totals(now: datetime, *, models: list[dict] | None = None, hosts: int | None = None) -> dict:
    """The operator's figures over the whole fleet. ``models`` (``capacity()``) and
    ``hosts`` may be passed when the caller has them already. A GPU in MIG mode reports
    through its slices (``sliced_util``)."""
    models = capacity() if models is None else models
    live = GpuLatest.objects.filter(slice__isnull=True, last_seen__gte=fresh_since(now)).aggregate(
        reporting=Count(_util()), mean=Avg(_util())
    )
    sliced = sliced_util(now)
    reporting = live["reporting"] + len(sliced)
    mean = None
    if reporting:
        mean = ((live["mean"] or 0) * live["reporting"] + sum(sliced.values())) / reporting
    return {
        "hosts": Host.objects.count() if hosts is None else hosts,
        "gpus": sum(r["total"] for r in models),
        "used": sum(r["used"] for r in models),
        "reporting": reporting,
        "mean_util": _mean(mean),
        "agents_up": AgentState.objects.filter(connected=True).count(),
        "alerts": _count(alert_hooks.active()),
    }


# A team's cost this month so far, as billing counts it: billing registers its function
# (BillingConfig.ready), so telemetry imports no billing code. None without billing.
_team_cost: Callable[..., Decimal] | None = None


def register_team_cost(team_cost: Callable[..., Decimal] | None) -> None:
    global _team_cost
    _team_cost = team_cost


def month_to_date(team) -> Decimal | None:
    """A team's cost this month so far as the overview shows it."""
    return None if _team_cost is None else _team_cost(team)


def _count(alerts) -> int:
    return 0 if alerts is None else alerts.count()


def holding(user) -> QuerySet:
    """The instances holding GPUs that ``user`` sees."""
    return Instance.objects.for_user(user).filter(state__in=HOLDING_STATES)


def team_totals(user, now: datetime) -> dict:
    """A team member's figures over every instance of their teams that holds GPUs."""
    held = holding(user)
    counts = held.order_by().aggregate(holding=Count("id"), running=Count("id", filter=Q(state=State.RUNNING)))
    ids = held.order_by().values("id")
    gpus = Gpu.objects.for_user(user).filter(instance_id__in=ids).count()
    gpus += GpuSlice.objects.for_user(user).filter(instance_id__in=ids).count()
    live = GpuLatest.objects.for_user(user).filter(instance_id__in=ids, last_seen__gte=fresh_since(now)).aggregate(
        mean=Avg(_util())
    )
    return {
        "holding": counts["holding"],
        "running": counts["running"],
        "gpus": gpus,
        "mean_util": _mean(live["mean"]),
        "alerts": _count(None if (active := alert_hooks.active()) is None else active.for_user(user)),
    }
