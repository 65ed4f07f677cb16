"""Placement: which host's GPUs (or slices) an instance gets, NVLink groups kept
together, free capacity for the launch form, and the holds that keep GPUs taken."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count

from .models import (
    Gpu,
    GpuHold,
    GpuModel,
    GpuSlice,
    Host,
    HostKind,
    HostState,
    Instance,
    Region,
    SliceProfile,
    gpu_free_q,
)
from .transitions import LifecycleError

MAX_GPUS_PER_INSTANCE = 16


class PlacementError(LifecycleError):
    """No host can hold the request now (answers 409 with the reason)."""

    code = "no_capacity"


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
    pools = nvlink_pools(free)
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


def nvlink_pools(gpus: list[Gpu]) -> dict[tuple[int, str], list[Gpu]]:
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
    pools = nvlink_pools(gpus)
    most = max((len(v) for v in pools.values()), default=0)
    return most, most < max(per_host.values(), default=0)


def free_gpus_by_host(*, gpu_model: GpuModel) -> dict[int, int]:
    """{host id: the most free whole GPUs of ``gpu_model`` one instance can get there
    (one NVLink group)} on active passthrough hosts."""
    out: dict[int, int] = {}
    for (host_id, _group), gpus in nvlink_pools(list(_free_whole_gpus(gpu_model).select_related("host"))).items():
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
        counts = [len(v) for v in nvlink_pools(list(_free_whole_gpus(gpu_model).select_related("host"))).values()]
    return sum(counts), max(counts, default=0)


def hold_gpus(instance: Instance, placement: Placement, at: datetime) -> None:
    Gpu.objects.filter(pk__in=[g.pk for g in placement.gpus]).update(instance=instance, team=instance.team)
    GpuSlice.objects.filter(pk__in=[s.pk for s in placement.slices]).update(instance=instance, team=instance.team)
    GpuHold.objects.bulk_create(
        [GpuHold(gpu_id=g.pk, instance=instance, team_id=instance.team_id, start=at) for g in placement.gpus]
        + [GpuHold(gpu_id=s.gpu_id, slice_id=s.pk, instance=instance, team_id=instance.team_id, start=at)
           for s in placement.slices]
    )
    instance.host = placement.host


def release_gpus(instance: Instance, at: datetime) -> None:
    Gpu.objects.filter(instance=instance).update(instance=None, team=None)
    GpuSlice.objects.filter(instance=instance).update(instance=None, team=None)
    GpuHold.objects.filter(instance=instance, end__isnull=True).update(end=at)
