"""The figures of a chart panel, as JSON: one GPU or slice (operators' host and GPU
pages) or an instance's devices, one at a time or all overlaid. monitoring/charts.py
builds every figure (look and data, gaps and throttle marks included);
static/monitoring/panel.js draws them as they come and only extends their traces with
live readings.

Query parameters: ``start``, ``end`` (ISO 8601 or Unix seconds; default the last hour)
and ``live=1`` (the x axis follows the data rather than spanning the window).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone

from console.policy import policy_required
from instances.models import Gpu, GpuSlice, Instance

from . import charts, pages, queries
from .models import GpuLatest, Sample

# Throttled readings read for one window at most (a week of 1 s readings throttled
# all along is 600,000: the marks would be one solid band long before this).
THROTTLE_ROWS = 20_000
# Throttled readings further apart than this are separate runs.
THROTTLE_GAP_S = 5.0


class BadWindow(Exception):
    def __init__(self, response: JsonResponse):
        self.response = response


def _window(request, metrics: tuple[str, ...]) -> queries.Window:
    params = {key: request.GET[key] for key in ("start", "end") if request.GET.get(key)}
    params["metric"] = list(metrics)
    try:
        return queries.parse_window(params)
    except queries.QueryError as exc:
        raise BadWindow(JsonResponse({exc.param: [exc.message]}, status=400)) from None


def _answer(window: queries.Window, tier: str, series_list: list[dict], figures: dict) -> dict:
    points = max((len(s.get(m, {}).get("t") or ()) for s in series_list for m in s), default=0)
    return {
        "tier": tier, "start": queries.iso(window.start), "end": queries.iso(window.end),
        "points": points, "figures": figures,
    }


def throttle_segments(user, window: queries.Window, **device) -> list[dict]:
    """Runs of clock slowdown reasons of one GPU in ``window``, from raw samples;
    ``device`` filters the samples (``gpu_id``, ``slice_id``, ``instance_id``)."""
    rows = (
        Sample.objects.for_user(user)
        .filter(time__gte=window.start, time__lt=window.end, clocks_event_reasons__gt=charts.CLOCK_IDLE, **device)
        .order_by("time")
        .values_list("time", "clocks_event_reasons")[:THROTTLE_ROWS]
    )
    times, masks = [], []
    for moment, mask in rows:
        times.append(queries.iso(moment))
        masks.append(mask)
    return charts.throttle_segments(times, masks, gap_s=THROTTLE_GAP_S)


def _limits(device: dict) -> dict:
    basis = device.get("tflops_basis")
    return {
        "memory_total": device["memory_total"],
        "power_limit_mw": device["power_limit_mw"],
        "alert_c": pages.alert_temp_c(),
        "peak_tflops": basis["peak_tflops"] if basis else None,
        "tflops_precision": (f"{basis['precision']}, {'declared by the workload' if not basis['doubtful'] else 'assumed'}"
                             if basis else None),
        "reports_activity": device.get("reports_activity", True),
    }


LIVE_SPAN = timedelta(minutes=15)  # the panel's "Live" range


@policy_required("signed_in")
def instance_figures(request, pk):
    """``device=<uuid>``: that device's charts; ``device=all``: every device per chart."""
    instance = get_object_or_404(Instance.objects.for_user(request.user), pk=pk)
    devices = pages.instance_devices(request.user, instance)
    try:
        window = _window(request, charts.GPU_METRICS)
    except BadWindow as bad:
        return bad.response
    wanted = request.GET.get("device") or "all"
    if wanted != "all" and not any(d["uuid"] == wanted for d in devices):
        return JsonResponse({"device": [f"{wanted} is not one of this instance's devices."]}, status=400)
    live = request.GET.get("live") == "1"
    return JsonResponse(instance_body(request.user, instance, devices, window, wanted=wanted, live=live))


def first_instance_body(user, instance, devices: list[dict]) -> dict:
    """What the panel shows first (live, every device overlaid), sent with its config
    so that the charts draw without another round trip."""
    end = timezone.now()
    window = queries.Window(start=end - LIVE_SPAN, end=end, metrics=charts.GPU_METRICS)
    return instance_body(user, instance, devices, window, wanted="all", live=True)


def instance_body(user, instance, devices: list[dict], window: queries.Window, *, wanted: str, live: bool) -> dict:
    bases = {d["uuid"]: d.get("timeline") or d["basis"] for d in devices}
    tier, by_uuid = queries.instance_series(user, window, instance_id=instance.pk, bases=bases)
    if not devices:
        return _answer(window, tier, [], {})
    frame = {"start": window.start, "end": window.end, "live": live, "tier": tier}
    if wanted == "all" and len(devices) > 1:
        figures = charts.overlay_figures(
            [(d["uuid"], d["label"], by_uuid.get(d["uuid"], {})) for d in devices],
            whole_gpu=not devices[0].get("slice"), **frame, **_limits(devices[0]),
        )
        return _answer(window, tier, list(by_uuid.values()), figures)
    device = devices[0] if wanted == "all" else next(d for d in devices if d["uuid"] == wanted)
    whole = not device.get("slice")
    throttle = throttle_segments(user, window, instance_id=instance.pk, gpu__uuid=device["uuid"],
                                 slice__isnull=True) if whole else []
    series = by_uuid.get(device["uuid"], {})
    figures = charts.device_figures(series, whole_gpu=whole, throttle=throttle, **frame, **_limits(device))
    return _answer(window, tier, [series], figures)


@policy_required("fleet.view")
def gpu_figures(request, uuid):
    """One GPU's or slice's charts, ECC included (operators)."""
    now: datetime = timezone.now()
    latest = GpuLatest.objects.filter(uuid=uuid).first()
    gpu = Gpu.objects.select_related("model", "host").filter(uuid=uuid).first()
    if gpu is not None:
        device, gpu_id, slice_id = pages.gpu_device(gpu, latest, now), gpu.pk, None
    else:
        piece = get_object_or_404(GpuSlice.objects.select_related("profile__gpu_model", "gpu"), uuid=uuid)
        device, gpu_id, slice_id = pages.slice_device(piece, latest, now), piece.gpu_id, piece.pk
    try:
        window = _window(request, charts.GPU_METRICS + charts.ECC_METRICS)
    except BadWindow as bad:
        return bad.response
    tier, series = queries.gpu_series(request.user, window, gpu_id=gpu_id, slice_id=slice_id)
    whole = slice_id is None
    throttle = throttle_segments(request.user, window, gpu_id=gpu_id, slice__isnull=True) if whole else []
    live = request.GET.get("live") == "1"
    figures = charts.device_figures(
        series, whole_gpu=whole, ecc=True, throttle=throttle, tier=tier, start=window.start, end=window.end,
        live=live, **_limits(device),
    )
    return JsonResponse(_answer(window, tier, [series], figures))


@policy_required("signed_in")
def instance_panel(request, pk):
    """The chart panel of an instance page: its devices now, or those it held."""
    instance = get_object_or_404(
        Instance.objects.for_user(request.user).select_related("gpu_model"), pk=pk
    )
    devices = pages.instance_devices(request.user, instance)
    procs = {g.uuid: pages.process_rows(g.pk, g.memory_total, instance_id=pk) for g in instance.gpus.all()} | {
        s.uuid: pages.process_rows(s.gpu_id, s.profile.memory_gb * charts.GIB, slice_id=s.pk, instance_id=pk)
        for s in instance.slices.select_related("profile")
    }
    url = reverse("instance-figures", args=[pk])
    config = pages.panel_config(devices, figures_url=url + "?device={uuid}", overlay_url=url + "?device=all",
                                live={"kind": "instance", "id": pk})
    config["procs"] = {
        uuid: [r | {"time": queries.iso(r["time"])} for r in rows] for uuid, rows in procs.items()
    }
    config["first"] = first_instance_body(request.user, instance, devices)
    return JsonResponse(config)
