"""The fleet operators register: hosts, their GPUs, GPU models and slice profiles."""

from __future__ import annotations

from django.db import transaction

from audit.recording import record_event

from .models import (
    Gpu,
    GpuModel,
    Host,
    HostKind,
    Region,
    SliceProfile,
)


@transaction.atomic
def register_host(*, actor, name: str, region: Region, kind: str = HostKind.PASSTHROUGH, nvlink_group: str = "") -> Host:
    host = Host.objects.create(name=name, region=region, kind=kind, nvlink_group=nvlink_group)
    record_event(actor=actor, action="host.register", target=host, details={"name": name, "region": region.name, "kind": kind})
    return host


@transaction.atomic
def update_host(*, actor, host: Host, **changes) -> Host:
    before = {field: getattr(host, field) for field in changes}
    for field, value in changes.items():
        setattr(host, field, value)
    host.full_clean()
    host.save()
    after = {k: (v.name if hasattr(v, "name") else v) for k, v in changes.items()}
    before = {k: (v.name if hasattr(v, "name") else v) for k, v in before.items()}
    record_event(actor=actor, action="host.update", target=host, details={"before": before, "after": after})
    return host


@transaction.atomic
def add_gpu(*, actor, host: Host, index: int, uuid: str, model: GpuModel, memory_total: int, pci_bus_id: str = "",
            nvlink_group: str = "") -> Gpu:
    gpu = Gpu.objects.create(host=host, index=index, uuid=uuid, model=model, memory_total=memory_total,
                             pci_bus_id=pci_bus_id, nvlink_group=nvlink_group)
    record_event(actor=actor, action="gpu.register", target=gpu, details={
        "host": host.name, "index": index, "uuid": uuid, "model": model.name, "nvlink_group": nvlink_group})
    return gpu


@transaction.atomic
def register_gpu_model(*, actor, name: str, memory_gb: int, power_limit_w: int, reported_as: str = "") -> GpuModel:
    """A GPU model first seen in a host's inventory. It has no price, so nothing can be
    launched on it until an operator prices it (launch answers 409 ``no_price``)."""
    model, created = GpuModel.objects.get_or_create(
        name=name, defaults={"memory_gb": memory_gb, "power_limit_w": power_limit_w}
    )
    if created:
        record_event(actor=actor, action="gpu_model.register", target=model,
                     details={"name": name, "memory_gb": memory_gb, "power_limit_w": power_limit_w,
                              "reported_as": reported_as, "priced": False})
    return model


@transaction.atomic
def register_slice_profile(*, actor, gpu_model: GpuModel, kind: str, name: str, memory_gb: int,
                           slices_per_gpu: int) -> SliceProfile:
    """A MIG/vGPU profile first seen in a host's inventory; unpriced until an operator
    prices its SKU."""
    profile, created = SliceProfile.objects.get_or_create(
        gpu_model=gpu_model, kind=kind, name=name, defaults={"memory_gb": memory_gb, "slices_per_gpu": slices_per_gpu}
    )
    if created:
        record_event(actor=actor, action="slice_profile.register", target=profile,
                     details={"sku": profile.sku, "memory_gb": memory_gb, "slices_per_gpu": slices_per_gpu,
                              "priced": False})
    return profile
