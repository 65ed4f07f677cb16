"""A demo fleet: three regions, A100/H100/H200 hosts (passthrough, MIG, vGPU), and
instances of Acme and Globex in every state and pricing model."""

import uuid
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from console.models import Team
from console.request_context import recorded_at

from . import images, inventory, lifecycle, preemption
from .models import (
    GpuModel,
    GpuSlice,
    Host,
    HostKind,
    Image,
    Instance,
    Region,
    SliceKind,
    SliceProfile,
)

# The GPU recorded in agent/traces/h200_mixed.jsonl; the replay agent reports it.
REPLAY_GPU_UUID = "GPU-cc7cc80c-c4d9-ea4f-fa04-56bccf2abc35"
REPLAY_HOST = "use1-h200-replay"

MODELS = [
    ("A100-80GB", 80, 400, "Ampere"),
    ("H100-80GB", 80, 700, "Hopper"),
    ("H200-141GB", 141, 700, "Hopper"),
]
PROFILES = [
    ("A100-80GB", SliceKind.MIG, "1g.10gb", 10, 7),
    ("A100-80GB", SliceKind.MIG, "3g.40gb", 40, 2),
    ("H100-80GB", SliceKind.MIG, "1g.10gb", 10, 7),
    ("H100-80GB", SliceKind.VGPU, "H100-20C", 20, 4),
]
REGIONS = [("us-east-1", "US East"), ("eu-west-1", "EU West"), ("ap-south-1", "Asia Pacific South")]
# name, region, kind, model, gpus, slice profile (MIG/vGPU hosts)
HOSTS = [
    ("use1-h100-01", "us-east-1", HostKind.PASSTHROUGH, "H100-80GB", 8, None),
    ("use1-h100-02", "us-east-1", HostKind.PASSTHROUGH, "H100-80GB", 8, None),
    ("use1-h100-03", "us-east-1", HostKind.PASSTHROUGH, "H100-80GB", 8, None),
    ("use1-a100-01", "us-east-1", HostKind.PASSTHROUGH, "A100-80GB", 8, None),
    ("use1-h200-01", "us-east-1", HostKind.PASSTHROUGH, "H200-141GB", 8, None),
    (REPLAY_HOST, "us-east-1", HostKind.PASSTHROUGH, "H200-141GB", 1, None),
    ("euw1-h100-01", "eu-west-1", HostKind.PASSTHROUGH, "H100-80GB", 8, None),
    ("euw1-a100-mig-01", "eu-west-1", HostKind.MIG, "A100-80GB", 4, "1g.10gb"),
    ("euw1-h100-vgpu-01", "eu-west-1", HostKind.VGPU, "H100-80GB", 4, "H100-20C"),
    ("aps1-a100-01", "ap-south-1", HostKind.PASSTHROUGH, "A100-80GB", 8, None),
    ("aps1-h200-01", "ap-south-1", HostKind.PASSTHROUGH, "H200-141GB", 8, None),
]

# PCIe cards joined by NVLink bridges in pairs: an instance there gets at most 2 GPUs.
PCIE_PAIRS = {"aps1-a100-01"}


def _gpu_uuid(host: str, index: int) -> str:
    if host == REPLAY_HOST:
        return REPLAY_GPU_UUID
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}.gpu{index}.gpuconsole.demo"))


@transaction.atomic
def seed_fleet(*, actor) -> None:
    models = {
        name: GpuModel.objects.get_or_create(
            name=name, defaults={"memory_gb": mem, "power_limit_w": watts, "architecture": arch}
        )[0]
        for name, mem, watts, arch in MODELS
    }
    profiles = {}
    for model, kind, name, mem, per_gpu in PROFILES:
        profiles[(model, name)] = SliceProfile.objects.get_or_create(
            gpu_model=models[model], kind=kind, name=name, defaults={"memory_gb": mem, "slices_per_gpu": per_gpu}
        )[0]
    regions = {
        name: Region.objects.get_or_create(name=name, defaults={"display_name": display})[0]
        for name, display in REGIONS
    }
    for name, region, kind, model, count, profile_name in HOSTS:
        if Host.objects.filter(name=name).exists():
            continue
        pairs = name in PCIE_PAIRS
        group = f"{name}-nvl" if kind == HostKind.PASSTHROUGH and count > 1 and not pairs else ""
        host = inventory.register_host(actor=actor, name=name, region=regions[region], kind=kind, nvlink_group=group)
        gpu_model = models[model]
        for index in range(count):
            gpu = inventory.add_gpu(
                actor=actor, host=host, index=index, uuid=_gpu_uuid(name, index), model=gpu_model,
                memory_total=gpu_model.memory_gb * 1024**3, pci_bus_id=f"00000000:{0x18 + index * 0x10:02X}:00.0",
                nvlink_group=f"{name}-nvl{index // 2}" if pairs else "",
            )
            if profile_name:
                profile = profiles[(model, profile_name)]
                GpuSlice.objects.bulk_create(
                    GpuSlice(gpu=gpu, profile=profile, gpu_instance_id=k + 1,
                             uuid=("MIG-" if profile.kind == SliceKind.MIG else "VGPU-") + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{gpu.uuid}/{k}")))
                    for k in range(profile.slices_per_gpu)
                )


ALL_MODELS = ("A100-80GB", "H100-80GB", "H200-141GB")
# name, framework, version, CUDA, reference, size in bytes, GPU models, default for them,
# owning team (None: public), retired days ago (None: in service)
IMAGES = [
    ("pytorch-24.10", "PyTorch", "2.5.0", "12.6", "nvcr.io/nvidia/pytorch:24.10-py3", 10_372_857_856,
     ALL_MODELS, True, None, None),
    ("tensorflow-24.10", "TensorFlow", "2.16.1", "12.6", "nvcr.io/nvidia/tensorflow:24.10-tf2-py3", 8_912_896_000,
     ALL_MODELS, False, None, None),
    ("nvhpc-24.9", "NVIDIA HPC SDK", "24.9", "12.6", "nvcr.io/nvidia/nvhpc:24.9-devel-cuda12.6-ubuntu22.04",
     9_663_676_416, ALL_MODELS, False, None, None),
    ("pytorch-23.05", "PyTorch", "2.0.0", "12.1", "nvcr.io/nvidia/pytorch:23.05-py3", 9_126_805_504,
     ("A100-80GB", "H100-80GB"), False, None, 5),
    ("acme-llm-train", "PyTorch", "2.5.1", "12.6",
     "registry.acme.example:5000/ml/llm-train:2026.11@sha256:"
     "3f1c5a9d7e2b4c6a8f0e1d3b5a7c9e2f4b6d8a0c2e4f6a8b0d2c4e6f8a0b2c4d", 12_884_901_888,
     ("H100-80GB", "H200-141GB"), False, "Acme", None),
]
# instance -> the image it was launched with (the rest boot their model's default)
IMAGE_OF = {"acme-llm-finetune": "acme-llm-train", "acme-train-70b": "acme-llm-train",
            "acme-old-exp": "pytorch-23.05", "globex-render": "tensorflow-24.10", "globex-pretrain": "nvhpc-24.9"}
# spot instances with a ceiling per GPU-hour (above where the demo's spot market goes)
MAX_PRICE = {"acme-batch-spot": "1.65"}
# precisions the teams set after launch (an H100 serving an fp8 model; the A100 has no fp8)
PRECISION = {"globex-chat-small": "fp8"}


@transaction.atomic
def seed_images(*, users) -> None:
    now = timezone.now()
    actors = {None: users["ops"], "Acme": users["bob"]}
    for name, framework, version, cuda, ref, size, models, default, team_name, _retired in IMAGES:
        team = Team.objects.get(name=team_name) if team_name else None
        if Image.objects.filter(name=name, team=team).exists():
            continue
        gpu_models = list(GpuModel.objects.filter(name__in=models))
        created = now - timedelta(days=120)
        with recorded_at(created):
            images.create_image(
                actor=actors[team_name], name=name, reference=ref, gpu_models=gpu_models, team=team,
                framework=framework, framework_version=version, cuda_version=cuda, size_bytes=size,
                default_for=gpu_models if default else (), at=created,
            )


def _retire_images(*, users) -> None:
    """After the instances that boot them are launched: retiring stops new launches only."""
    now = timezone.now()
    for name, *_, team_name, retired in IMAGES:
        image = Image.objects.filter(name=name, team__name=team_name, retired_at=None).first()
        if image is not None and retired is not None:
            with recorded_at(now - timedelta(days=retired)):
                images.retire_image(actor=users["ops"], image=image, at=now - timedelta(days=retired))


# team, name, model, count, pricing, slice, final state, launched hours ago
INSTANCES = [
    ("Acme", "acme-llm-finetune", "H200-141GB", 1, "on_demand", None, "running", 30, REPLAY_HOST),
    ("Acme", "acme-train-70b", "H100-80GB", 8, "reserved", None, "running", 200, None),
    ("Acme", "acme-inference-a", "H100-80GB", 2, "on_demand", None, "running", 50, None),
    ("Acme", "acme-batch-spot", "A100-80GB", 4, "spot", None, "running", 6, None),
    ("Acme", "acme-notebook", "A100-80GB", 1, "on_demand", "1g.10gb", "running", 20, None),
    ("Acme", "acme-eval", "H100-80GB", 1, "on_demand", None, "stopped", 70, None),
    ("Acme", "acme-old-exp", "A100-80GB", 2, "on_demand", None, "terminated", 300, None),
    ("Acme", "acme-spot-sweep", "H100-80GB", 2, "spot", None, "preempted", 3, None),
    ("Acme", "acme-new-job", "H100-80GB", 1, "on_demand", None, "pending", 0, None),
    # small models on whole GPUs for a week (sim.workload_for: "light"), so rightsizing has
    # something to say: an embedding server that fits a MIG slice, and a small chat model
    # served from the first of four GPUs, the other three idle
    ("Acme", "acme-embed-api", "H100-80GB", 1, "on_demand", None, "running", 180, None),
    ("Globex", "globex-pretrain", "H200-141GB", 8, "reserved", None, "running", 400, None),
    ("Globex", "globex-serve", "H100-80GB", 1, "on_demand", "H100-20C", "running", 90, None),
    ("Globex", "globex-render", "A100-80GB", 2, "spot", None, "running", 12, None),
    ("Globex", "globex-dev", "H100-80GB", 1, "on_demand", None, "stopping", 40, None),
    ("Globex", "globex-chat-small", "H100-80GB", 4, "on_demand", None, "running", 180, None),
    ("Globex", "globex-archive", "A100-80GB", 1, "reserved", None, "terminated", 500, None),
]


@transaction.atomic
def seed_instances(*, users) -> None:
    now = timezone.now()
    seed_images(users=users)
    actors = {"Acme": users["bob"], "Globex": users["charlie"]}
    for team_name, name, model, count, pricing, profile, final, hours_ago, host_name in INSTANCES:
        team = Team.objects.get(name=team_name)
        if Instance.objects.filter(team=team, name=name).exists():
            continue
        actor = actors[team_name]
        gpu_model = GpuModel.objects.get(name=model)
        slice_profile = SliceProfile.objects.get(gpu_model=gpu_model, name=profile) if profile else None
        start = now - timedelta(hours=hours_ago, minutes=5)
        image = Image.objects.filter(Q(team=None) | Q(team=team), name=IMAGE_OF.get(name)).first()
        with recorded_at(start):  # the audit log tells when each seeded action happened
            instance = lifecycle.launch_instance(
                actor=actor, team=team, name=name, gpu_model=gpu_model, gpu_count=count, pricing_model=pricing,
                slice_profile=slice_profile, at=start, provision=False, image=image,
                max_price=MAX_PRICE.get(name),
                # pinned to the replayed GPU so the demo's live chart is real NVML data
                host=Host.objects.get(name=host_name) if host_name else None,
            )
        _walk_to(instance, final, start, actor)
        if name in PRECISION:
            at = start + timedelta(minutes=3)
            with recorded_at(at):
                lifecycle.set_precision(actor=actor, instance=instance, precision=PRECISION[name], at=at)
    _retire_images(users=users)


def _walk_to(instance, final: str, start, actor) -> None:
    step = timedelta(seconds=90)
    if final == "pending":
        return
    with recorded_at(start + step):
        lifecycle.mark_running(instance=instance, at=start + step)
    if final == "running":
        return
    if final == "preempted":
        with recorded_at(start + 40 * step):
            preemption.preempt_instance(instance=instance, reason="capacity reclaimed for on-demand", at=start + 40 * step)
        return
    if final == "terminated":
        with recorded_at(start + 100 * step):
            lifecycle.terminate_instance(actor=actor, instance=instance, at=start + 100 * step)
        return
    with recorded_at(start + 30 * step):
        lifecycle.stop_instance(actor=actor, instance=instance, at=start + 30 * step, finish=False)
    if final == "stopped":
        with recorded_at(start + 31 * step):
            lifecycle.finish_stop(instance=instance, at=start + 31 * step)
