"""Host and GPU health on the operators' pages: the verdicts in words, the cordons, the
diagnostics bundles, and the page forms that cordon, drain and collect."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse

from console.policy import policy_required
from instances import cordon
from instances.models import Gpu, Host

from . import diagnostics, health, verdicts
from .models import DiagnosticsBundle, GpuHealth

HOST_VERBS = ("cordon", "uncordon", "drain")
GPU_VERBS = ("cordon", "uncordon")


def host_context(host: Host, gpus: list[Gpu]) -> dict:
    rows = verdicts.gpu_verdicts(g.pk for g in gpus)
    return {
        "health": verdicts.host_verdict_of(gpus, rows),  # ``gpus``: all of the host's
        "gpu_health": [{"gpu": g, "row": rows.get(g.pk)} for g in gpus],
        "bundles": DiagnosticsBundle.objects.filter(host=host).select_related("requested_by")[:20],
        "pending_bundle": DiagnosticsBundle.objects.filter(host=host, state="requested").exists(),
    }


def gpu_context(gpu: Gpu) -> dict:
    row = GpuHealth.objects.filter(gpu=gpu).first()
    return {"gpu_health": row, "gpu_state": row.state if row else health.HEALTHY}


@policy_required("fleet.operate", methods=["POST"])
def host_collect(request, pk):
    host = get_object_or_404(Host, pk=pk)
    try:
        diagnostics.request_bundle(actor=request.user, host=host)
    except diagnostics.DiagnosticsError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Diagnostics asked of {host.name}'s agent; the bundle is listed once uploaded.")
    return redirect(reverse("host-detail", args=[host.pk]) + "#diagnostics")


@policy_required("fleet.operate", methods=["POST"])
def host_placement(request, pk, verb):
    host = get_object_or_404(Host, pk=pk)
    if verb not in HOST_VERBS:
        messages.error(request, f"Unknown action {verb!r}: one of {', '.join(HOST_VERBS)}.")
        return redirect("host-detail", host.pk)
    reason = request.POST.get("reason", "")
    try:
        if verb == "cordon":
            cordon.cordon_host(actor=request.user, host=host, reason=reason)
            messages.success(request, f"{host.name} is cordoned: no new instances are placed on it.")
        elif verb == "uncordon":
            cordon.uncordon_host(actor=request.user, host=host)
            messages.success(request, f"{host.name} takes new instances again.")
        else:
            drain = cordon.drain_host(actor=request.user, host=host, reason=reason)
            moved = ", ".join(i.name for i in drain.to_move) or "none"
            messages.success(request, f"{host.name} is draining: {len(drain.preempted)} spot or low-priority "
                                      f"instance(s) given notice; on-demand and reserved to move: {moved}.")
    except cordon.CordonError as exc:
        messages.error(request, str(exc))
    return redirect("host-detail", host.pk)


@policy_required("fleet.operate", methods=["POST"])
def gpu_placement(request, uuid, verb):
    gpu = get_object_or_404(Gpu.objects.select_related("host"), uuid=uuid)
    if verb not in GPU_VERBS:
        messages.error(request, f"Unknown action {verb!r}: one of {', '.join(GPU_VERBS)}.")
        return redirect("gpu-detail", gpu.uuid)
    try:
        if verb == "cordon":
            cordon.cordon_gpu(actor=request.user, gpu=gpu, reason=request.POST.get("reason", ""))
            messages.success(request, f"GPU {gpu.index} of {gpu.host.name} is cordoned.")
        else:
            cordon.uncordon_gpu(actor=request.user, gpu=gpu)
            messages.success(request, f"GPU {gpu.index} of {gpu.host.name} takes new instances again.")
    except cordon.CordonError as exc:
        messages.error(request, str(exc))
    return redirect("gpu-detail", gpu.uuid)
