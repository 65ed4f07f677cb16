"""The host's inventory as its agent reports it: the hello's GPUs and MIG slices are
registered, updated or flagged as gone, and a GPU the inventory places on another host
is refused. Called by the agent consumer before any samples of the connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.db import transaction

from audit.recording import record_event
from instances import inventory as instance_inventory
from instances.models import Gpu, GpuModel, GpuSlice, Host, SliceKind, SliceProfile

from . import alert_hooks
from .frames import GpuInfo, Hello
from .models import EventKind, GpuEvent


class Refused(Exception):
    """The agent is refused (a GPU of another host, a token of another host, a flood):
    ``code`` and ``close_code`` go to the agent."""

    def __init__(self, close_code: int, code: str, message: str):
        super().__init__(message)
        self.close_code, self.code, self.message = close_code, code, message


@dataclass
class HelloResult:
    registered: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)


def accept_hello(*, host: Host, hello: Hello, conflict_code: int) -> HelloResult:
    """Register GPUs the host reports for the first time, flag those it no longer
    reports, and refuse GPUs the inventory places on another host."""
    with transaction.atomic():
        elsewhere = _elsewhere(host, hello)
        if elsewhere:
            _flag_moved(host, elsewhere)
    if elsewhere:
        uuid, other = elsewhere[0]
        raise Refused(conflict_code, "gpu_conflict", f"GPU {uuid} is registered to host {other}, not {host.name}")
    with transaction.atomic():
        return _reconcile(host, hello)


def _elsewhere(host: Host, hello: Hello) -> list[tuple[str, str]]:
    gpu_uuids = [g.uuid for g in hello.gpus]
    slice_uuids = [s.uuid for g in hello.gpus for s in g.slices]
    found = list(Gpu.objects.filter(uuid__in=gpu_uuids).exclude(host=host).values_list("uuid", "host__name"))
    found += list(
        GpuSlice.objects.filter(uuid__in=slice_uuids).exclude(gpu__host=host).values_list("uuid", "gpu__host__name")
    )
    return found


def _flag_moved(host: Host, elsewhere: list[tuple[str, str]]) -> None:
    for uuid, other in elsewhere:
        gpu = Gpu.objects.filter(uuid=uuid).first()
        GpuEvent.objects.create(
            kind=EventKind.MOVED, host=host, gpu=gpu, uuid=uuid,
            message=f"{host.name} reports {uuid}, which the inventory places on {other}.",
            details={"registered_host": other},
        )


def _reconcile(host: Host, hello: Hello) -> HelloResult:
    result = HelloResult()
    known = {g.uuid: g for g in Gpu.objects.filter(host=host).select_related("model")}
    reported = {g.uuid for g in hello.gpus}
    _make_room(host, known, hello)
    for info in hello.gpus:
        gpu = known.get(info.uuid)
        if gpu is None:
            gpu = _register_gpu(host, info)
            result.registered.append(info.uuid)
        else:
            _update_gpu(host, gpu, info)
        _register_slices(host, gpu, info, result)
    alert_hooks.resolve(*(f"gpu_lost:{info.uuid}" for info in hello.gpus), why=f"{host.name} reports it again")
    for uuid, gpu in known.items():
        if uuid in reported:
            continue
        result.vanished.append(uuid)
        if alert_hooks.is_active(f"gpu_lost:{uuid}"):
            continue
        GpuEvent.objects.create(
            kind=EventKind.VANISHED, host=host, gpu=gpu, uuid=uuid, instance_id=gpu.instance_id, team_id=gpu.team_id,
            message=f"{host.name} no longer reports {uuid} (GPU {gpu.index}).",
        )
        alert_hooks.raise_alert(
            "gpu_lost", key=f"gpu_lost:{uuid}", host_id=host.pk, gpu_id=gpu.pk, uuid=uuid, instance_id=gpu.instance_id,
            team_id=gpu.team_id, message=f"{uuid} (GPU {gpu.index} of {host.name}) is missing from its agent's report.",
        )
    return result


# NVML indexes are 0-63; a GPU that no longer holds its index waits above them.
PARKED_FROM = 64


def _make_room(host: Host, known: dict[str, Gpu], hello: Hello) -> None:
    """Free every index the hello assigns: a GPU sitting on another GPU's index (it
    moved slot, or vanished and was replaced) is parked above the NVML range first."""
    wanted = {info.index: info.uuid for info in hello.gpus}
    taken = {g.index for g in known.values()}
    for gpu in known.values():
        if wanted.get(gpu.index, gpu.uuid) != gpu.uuid:
            parked = next(i for i in range(PARKED_FROM, 32767) if i not in taken)
            taken.add(parked)
            Gpu.objects.filter(pk=gpu.pk).update(index=parked)
            gpu.index = parked


def _update_gpu(host: Host, gpu: Gpu, info: GpuInfo) -> None:
    changes = {}
    if gpu.index != info.index:
        changes["index"] = (gpu.index, info.index)
    if info.pci_bus_id and gpu.pci_bus_id != info.pci_bus_id:
        changes["pci_bus_id"] = (gpu.pci_bus_id, info.pci_bus_id)
    if gpu.memory_total != info.memory_total:
        changes["memory_total"] = (gpu.memory_total, info.memory_total)
    if not changes:
        return
    Gpu.objects.filter(pk=gpu.pk).update(**{k: new for k, (_, new) in changes.items()})
    record_event(
        actor=host, action="gpu.update", target=gpu,
        details={"host": host.name, "uuid": gpu.uuid, **{k: {"from": a, "to": b} for k, (a, b) in changes.items()}},
    )


def _register_gpu(host: Host, info: GpuInfo) -> Gpu:
    gpu = instance_inventory.add_gpu(
        actor=host, host=host, index=info.index, uuid=info.uuid,
        model=gpu_model_for(info.name, info.memory_total, info.power_limit_mw, actor=host),
        memory_total=info.memory_total, pci_bus_id=info.pci_bus_id,
    )
    GpuEvent.objects.create(
        kind=EventKind.REGISTERED, host=host, gpu=gpu, uuid=info.uuid,
        message=f"{host.name} reported a new GPU {info.uuid} ({info.name or gpu.model.name}) at index {info.index}.",
    )
    return gpu


def _register_slices(host: Host, gpu: Gpu, info: GpuInfo, result: HelloResult) -> None:
    if not info.slices:
        return
    known = set(GpuSlice.objects.filter(gpu=gpu).values_list("uuid", flat=True))
    for s in info.slices:
        if s.uuid in known:
            continue
        profile = _slice_profile(gpu.model, s.profile or "unknown", s.memory_total, actor=host)
        piece = GpuSlice.objects.create(gpu=gpu, profile=profile, uuid=s.uuid, gpu_instance_id=s.gpu_instance_id)
        record_event(actor=host, action="gpu_slice.register", target=piece,
                     details={"host": host.name, "gpu": gpu.uuid, "uuid": s.uuid, "profile": profile.name})
        result.registered.append(s.uuid)


_FAMILY = re.compile(r"([A-Z]+\d+[A-Z]*)")


def gpu_model_for(name: str, memory_total: int, power_limit_mw: int | None, *, actor="system") -> GpuModel:
    """The catalog model for what NVML calls ``name`` (e.g. "NVIDIA H200"), matched on its
    family and memory size; a model the catalog lacks is registered (audited, unpriced:
    it cannot be launched until an operator prices it)."""
    exact = GpuModel.objects.filter(name=name).first()
    if exact is not None:
        return exact
    gib = memory_total / 2**30
    match = _FAMILY.search(name.removeprefix("NVIDIA").upper())
    family = match.group(1) if match else "GPU"
    for model in GpuModel.objects.filter(name__istartswith=family):
        if gib and abs(model.memory_gb - gib) <= 0.1 * model.memory_gb:
            return model
    return instance_inventory.register_gpu_model(
        actor=actor, name=f"{family}-{round(gib)}GB", memory_gb=max(1, round(gib)),
        power_limit_w=(power_limit_mw or 700_000) // 1000, reported_as=name,
    )


def _slice_profile(model: GpuModel, name: str, memory_total: int | None, *, actor) -> SliceProfile:
    existing = SliceProfile.objects.filter(gpu_model=model, name=name).first()
    if existing is not None:
        return existing
    memory_gb = max(1, round((memory_total or 0) / 2**30))
    return instance_inventory.register_slice_profile(
        actor=actor, gpu_model=model, kind=SliceKind.MIG, name=name[:40], memory_gb=memory_gb,
        slices_per_gpu=max(1, min(7, model.memory_gb // memory_gb)),
    )
