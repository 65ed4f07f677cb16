"""Console pages of the telemetry app: the overview (a team's GPUs, or the whole
fleet for operators), host and GPU detail (operators), and what a chart panel needs
to draw itself (panels.py serves it).

Every queryset goes through ``for_user``; host and GPU pages are for operators.
Each page reads what it shows in a fixed number of queries, whatever the fleet size.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, F
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from console.models import Team
from console.policy import may, policy_required, require
from instances.models import (
    Gpu,
    GpuSlice,
    Host,
    HostKind,
    Instance,
    gpu_used_q,
    nvlink_groups,
    nvlink_text,
)

from . import alert_hooks, charts, figures, health_pages, queries, readings, verdicts
from .models import (
    AgentState,
    EventKind,
    GpuEvent,
    GpuLatest,
    Rollup1h,
    Sample,
    stale_after_s,
)

GIB = charts.GIB
# The clock events an operator looks for on a GPU page.
HEALTH_EVENTS = (EventKind.XID, EventKind.ECC, EventKind.GPU_LOST, EventKind.GPU_BACK)
PROC_LOOKBACK = 120  # readings searched for each process's latest SM use




def alert_temp_c() -> float:
    return float(getattr(settings, "ALERT_TEMP_C", 85))


# --- devices and tiles --------------------------------------------------------------


def gpu_device(gpu: Gpu, latest: GpuLatest | None, now, sliced_util: float | None = None) -> dict:
    """``sliced_util``: in MIG mode, the utilization of its slices (``figures.sliced_util``)."""
    metrics = latest.metrics if latest else {}
    if sliced_util is not None and metrics.get("gpu_util") is None:
        metrics = {**metrics, "gpu_util": sliced_util}
    reading = readings.of_latest(latest, now=now) if latest else {"t": None, "stale": True}
    limit = metrics.get("power_limit_mw") or gpu.model.power_limit_w * 1000
    return {
        "uuid": gpu.uuid,
        "label": f"gpu{gpu.index} · {gpu.model.name}",
        "host": gpu.host.name,
        "memory_total": gpu.memory_total,
        "power_limit_mw": limit,
        "tile": charts.tile(metrics, memory_total=gpu.memory_total, power_limit_mw=limit, tensor_missing=(
            charts.tensor_absence(architecture=gpu.model.architecture, model=gpu.model.name, host_kind=gpu.host.kind)
        )),
        "t": reading["t"],
        "stale": reading["stale"],
        "seen": latest is not None,
    }


# A job's run is an instance; its job, where it has one, read in the same query.
HOLDER_JOB = {"job_name": F("instance__job_run__job__name"), "job_priority": F("instance__job_run__job__priority")}


def holder(gpu: Gpu, pieces: list[GpuSlice] = ()) -> dict | None:
    """Who holds a GPU now (None: free): its instance, team and, for a job's run, the job.
    A GPU split into MIG or vGPU slices (``pieces``, any host's; its own are picked) is
    never free whole: it reads how many of its slices are held, and by which instances
    (``gpu_used_q``: used once any slice is held)."""
    if gpu.instance is not None:
        return {"instance": gpu.instance, "team": gpu.team, "job": gpu.job_name, "priority": gpu.job_priority}
    own = [s for s in pieces if s.gpu_id == gpu.pk]
    if not own:
        return None
    held = [s for s in own if s.instance_id is not None]
    instances = list({s.instance_id: (s.instance, s.team) for s in held}.values())
    return {"slices": len(own), "held": len(held), "instances": instances}


def slice_device(piece: GpuSlice, latest: GpuLatest | None, now) -> dict:
    metrics = latest.metrics if latest else {}
    reading = readings.of_latest(latest, now=now) if latest else {"t": None, "stale": True}
    total = piece.profile.memory_gb * GIB
    return {
        "uuid": piece.uuid,
        "label": f"gpu{piece.gpu.index} {piece.profile.kind.upper()} {piece.profile.name} #{piece.gpu_instance_id}",
        "host": "",
        "memory_total": total,
        "power_limit_mw": None,
        "tile": charts.tile(metrics, memory_total=total, tensor_missing=charts.tensor_absence(
            architecture=piece.profile.gpu_model.architecture, model=piece.profile.gpu_model.name,
            slice_kind=piece.profile.kind,
        )),
        "slice": True,
        "reports_activity": piece.profile.reports_activity,
        "t": reading["t"],
        "stale": reading["stale"],
        "seen": latest is not None,
    }


def latest_by_uuid(qs) -> dict[str, GpuLatest]:
    return {row.uuid: row for row in qs}


# --- overview -----------------------------------------------------------------------


@policy_required("signed_in")
def overview(request):
    page = request.GET.get("page")
    if may(request.user, "fleet.view"):
        return render(request, "monitoring/fleet.html", fleet_context(request.user, page=page))
    return render(request, "monitoring/overview.html", team_context(request.user, page=page))


# What one screen of the overview draws; the figures above it cover everything.
INSTANCES_PER_PAGE = 12
HOSTS_PER_PAGE = 48


def team_context(user, *, page=None) -> dict:
    """A team's figures (``figures.team_totals``), then one page of its instances
    holding GPUs with a tile per GPU, open alerts and month-to-date cost."""
    now = timezone.now()
    teams = list(Team.objects.for_user(user).order_by("name"))
    shown = Paginator(
        figures.holding(user).select_related("team", "gpu_model", "slice_profile", "host")
        .annotate(job_name=F("job_run__job__name"), job_priority=F("job_run__job__priority")).order_by("team__name", "name"),
        INSTANCES_PER_PAGE,
    ).get_page(page)
    instances = list(shown.object_list)
    ids = [i.pk for i in instances]
    gpus = Gpu.objects.for_user(user).filter(instance_id__in=ids).select_related("model", "host")
    pieces = (
        GpuSlice.objects.for_user(user).filter(instance_id__in=ids).select_related("profile__gpu_model", "gpu")
    )
    latest = latest_by_uuid(GpuLatest.objects.for_user(user).filter(instance_id__in=ids))
    devices: dict[int, list[dict]] = {i: [] for i in ids}
    for gpu in gpus:
        devices[gpu.instance_id].append(gpu_device(gpu, latest.get(gpu.uuid), now))
    for piece in pieces:
        devices[piece.instance_id].append(slice_device(piece, latest.get(piece.uuid), now))
    active = alert_hooks.active()
    alerts = [] if active is None else active.for_user(user).select_related("host")
    totals = figures.team_totals(user, now)
    return {
        "teams": [{"team": t, "cost": figures.month_to_date(t)} for t in teams],
        "instances": [{"instance": i, "devices": devices[i.pk]} for i in instances],
        "page": shown,
        "alerts": list(alerts[:8]),
        "alert_count": totals["alerts"],
        "holding_count": totals["holding"],
        "running_count": totals["running"],
        "gpu_count": totals["gpus"],
        "mean_util": totals["mean_util"],
        "live": {
            "subscribe": [{"kind": "team", "id": t.pk} for t in teams],
            "stale_after_s": stale_after_s(),
            "client": charts.client_settings(),
        },
    }


def fleet_context(user, *, page=None) -> dict:
    """The fleet's figures and capacity per model (``figures``), then one page of hosts
    grouped by region with their utilization heatmap."""
    require(user, "fleet.view")
    now = timezone.now()
    shown = Paginator(Host.objects.select_related("region").order_by("region__name", "name"), HOSTS_PER_PAGE).get_page(
        page
    )
    hosts = list(shown.object_list)
    host_ids = [h.pk for h in hosts]
    gpus = list(
        Gpu.objects.filter(host_id__in=host_ids)
        .order_by()
        .values("id", "uuid", "index", "host_id")
        .annotate(used=Count("id", filter=gpu_used_q(), distinct=True))
    )
    latest = {
        row["gpu_id"]: row
        for row in GpuLatest.objects.filter(host_id__in=host_ids, slice__isnull=True).values(
            "gpu_id", "metrics", "last_seen"
        )
    }
    agents = {
        a["host_id"]: a
        for a in AgentState.objects.filter(host_id__in=host_ids).values("host_id", "connected", "last_seen_at")
    }
    after = stale_after_s()
    health = verdicts.host_verdicts(hosts)
    sliced = figures.sliced_util(now, [g["id"] for g in gpus])
    by_host: dict[int, list[dict]] = {h.pk: [] for h in hosts}
    for gpu in gpus:
        row = latest.get(gpu["id"])
        metrics = row["metrics"] if row else {}
        stale = row is None or (now - row["last_seen"]).total_seconds() > after
        if gpu["id"] in sliced:  # MIG mode: its utilization is its slices'
            metrics, stale = {**metrics, "gpu_util": sliced[gpu["id"]]}, False
        by_host[gpu["host_id"]].append({"gpu": gpu, "m": metrics, "stale": stale, "used": gpu["used"] > 0})
    regions: dict[str, dict] = {}
    heat_rows, heat_index, slice_index = [], {}, {}
    for host in hosts:
        cells = sorted(by_host[host.pk], key=lambda c: c["gpu"]["index"])
        summary = host_summary(host, cells, agents.get(host.pk), now)
        summary["health"] = health[host.pk]
        regions.setdefault(host.region.name, {"region": host.region, "hosts": []})["hosts"].append(
            summary
        )
        width = max((c["gpu"]["index"] for c in cells), default=-1) + 1
        values = [None] * width
        for cell in cells:
            values[cell["gpu"]["index"]] = None if cell["stale"] else cell["m"].get("gpu_util")
            heat_index[cell["gpu"]["uuid"]] = [len(heat_rows), cell["gpu"]["index"]]
        heat_rows.append((host.name, values))
    for piece in GpuSlice.objects.filter(gpu_id__in=list(sliced)).values("uuid", "gpu__uuid", "profile__slices_per_gpu"):
        slice_index[piece["uuid"]] = [*heat_index[piece["gpu__uuid"]], 1 / max(1, piece["profile__slices_per_gpu"]),
                                      piece["gpu__uuid"]]
    capacity_rows = figures.capacity()
    totals = figures.fleet_totals(now, models=capacity_rows, hosts=shown.paginator.count)
    title = "GPU utilization"
    if shown.paginator.num_pages > 1:
        title += f" · hosts {shown.start_index():,}–{shown.end_index():,} of {shown.paginator.count:,}"
    alerts = alert_hooks.active()
    return {
        "regions": list(regions.values()),
        "page": shown,
        "heatmap": charts.heatmap_figure(heat_rows, title=title),
        "capacity": capacity_rows,
        "capacity_figure": charts.capacity_figure(capacity_rows),
        "totals": totals,
        "alerts": [] if alerts is None else list(alerts.select_related("host")[:8]),
        "alert_count": totals["alerts"],
        "live": {
            "subscribe": [{"kind": "fleet", "id": None}],
            "heat_index": heat_index,
            "slice_index": slice_index,  # a slice's cell is its GPU's: [row, column, share, GPU uuid]
            "host_urls": {h.name: reverse("host-detail", args=[h.pk]) for h in hosts},
            "stale_after_s": after,
            "client": charts.client_settings(),
        },
    }


def host_summary(host: Host, cells: list[dict], agent: dict | None, now) -> dict:
    fresh = [c["m"] for c in cells if not c["stale"]]
    utils = [m["gpu_util"] for m in fresh if m.get("gpu_util") is not None]
    temps = [m["temp_c"] for m in fresh if m.get("temp_c") is not None]
    power = [m["power_mw"] for m in fresh if m.get("power_mw") is not None]
    last = agent["last_seen_at"] if agent else None
    return {
        "host": host,
        "gpus": len(cells),
        "used": sum(1 for c in cells if c["used"]),
        "mean_util": round(sum(utils) / len(utils)) if utils else None,
        "max_temp": round(max(temps)) if temps else None,
        "power_w": round(sum(power) / 1000) if power else None,
        "agent": "connected" if agent and agent["connected"] else "silent" if last else "never",
        "last_seen": last,
        "uuids": [c["gpu"]["uuid"] for c in cells],
    }


# --- chart panels -------------------------------------------------------------------


def panel_config(devices: list[dict], *, figures_url: str, live: dict, overlay_url: str | None = None) -> dict:
    """What static/monitoring/panel.js needs: the devices, where their figures come from
    (monitoring/panels.py builds them with monitoring/charts.py) and what to subscribe
    to for live readings. ``figures_url`` holds ``{uuid}``; ``overlay_url`` draws every
    device on each chart."""
    return {
        "devices": [
            {"uuid": d["uuid"], "label": d["label"], "tflops_basis": d.get("tflops_basis")} for d in devices
        ],
        "figures_url": figures_url,
        "overlay_url": overlay_url if len(devices) > 1 else None,
        "live": live,
        "stale_after_s": stale_after_s(),
        "client": charts.client_settings(),
    }


def gpu_figures_url() -> str:
    return reverse("gpu-figures", args=["UUID"]).replace("UUID", "{uuid}")


def instance_devices(user, instance: Instance) -> list[dict]:
    """The devices an instance's panel charts: those it holds now, else those it held,
    each with the basis of its TFLOP/s estimate."""
    now = timezone.now()
    latest = latest_by_uuid(GpuLatest.objects.for_user(user).filter(instance_id=instance.pk))
    devices = [gpu_device(g, latest.get(g.uuid), now) for g in instance.gpus.select_related("model", "host")]
    devices += [
        slice_device(s, latest.get(s.uuid), now)
        for s in instance.slices.select_related("profile__gpu_model", "gpu")
    ]
    if not devices:
        devices = held_before(instance)
    bases = queries.instance_bases(instance)
    for device in devices:
        device["timeline"] = bases.get(device["uuid"])
        device["basis"] = device["timeline"].current if device["timeline"] else None
        device["tflops_basis"] = device["basis"].as_dict() if device["basis"] else None
    return devices


def held_before(instance: Instance) -> list[dict]:
    """The GPUs and slices an instance that holds none now reported from (last 30 days),
    labelled as while it held them (``gpu_device``, ``slice_device``)."""
    since = timezone.now() - timedelta(days=30)
    keys = set(
        Rollup1h.objects.filter(instance_id=instance.pk, bucket__gte=since).values_list(
            "gpu_id", "slice_id"
        )
    )
    keys |= set(
        Sample.objects.filter(instance_id=instance.pk, time__gte=since).values_list(
            "gpu_id", "slice_id"
        )
    )
    gpus = Gpu.objects.select_related("model").in_bulk({g for g, _ in keys})
    pieces = GpuSlice.objects.select_related("profile").in_bulk({s for _, s in keys if s})
    devices = []
    for gpu_id, slice_id in sorted(keys, key=lambda k: (k[0], k[1] or 0)):
        gpu = gpus[gpu_id]
        if slice_id:
            piece = pieces[slice_id]
            devices.append(
                {
                    "uuid": piece.uuid,
                    "label": f"gpu{gpu.index} {piece.profile.kind.upper()} {piece.profile.name} #{piece.gpu_instance_id}",
                    "memory_total": piece.profile.memory_gb * GIB,
                    "power_limit_mw": None,
                    "slice": True,
                }
            )
        else:
            devices.append(
                {
                    "uuid": gpu.uuid,
                    "label": f"gpu{gpu.index} · {gpu.model.name}",
                    "memory_total": gpu.memory_total,
                    "power_limit_mw": None,
                }
            )
    return devices


@policy_required("signed_in", methods=["POST"])
def instance_precision(request, pk):
    """Set the precision the instance's TFLOP/s estimate assumes (team writers)."""
    from instances import lifecycle as instance_lifecycle
    from instances import transitions as instance_transitions

    instance = get_object_or_404(Instance.objects.for_user(request.user), pk=pk)
    require(request.user, "team.write", instance, "Your role in this team does not allow you to change this instance.")
    try:
        instance_lifecycle.set_precision(actor=request.user, instance=instance, precision=request.POST.get("precision", ""))
    except instance_transitions.LifecycleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"The TFLOP/s estimate of {instance.name} now assumes {request.POST['precision']}.")
    return redirect("instance-detail", pk=pk)


# --- hosts and GPUs (operators) -----------------------------------------------------


@policy_required("fleet.view")
def host_detail(request, pk):
    host = get_object_or_404(Host.objects.select_related("region"), pk=pk)
    now = timezone.now()
    gpus = list(host.gpus.select_related("model", "instance", "team").annotate(**HOLDER_JOB).order_by("index"))
    latest = latest_by_uuid(GpuLatest.objects.filter(host=host))
    pieces = list(
        GpuSlice.objects.filter(gpu__host=host).select_related("profile__gpu_model", "gpu", "instance", "team")
        .order_by("gpu__index", "gpu_instance_id")
    )
    sliced = figures.sliced_util(now, [g.pk for g in gpus])
    devices = [gpu_device(g, latest.get(g.uuid), now, sliced.get(g.pk)) | {"gpu": g, "holder": holder(g, pieces)} for g in gpus]
    for device in devices:  # live, a GPU in MIG mode follows its slices' readings
        if device["gpu"].pk in sliced:
            device["slices"] = {s.uuid: 1 / max(1, s.profile.slices_per_gpu) for s in pieces
                                if s.gpu_id == device["gpu"].pk}
    # The charts offer every slice too; on a MIG host first, as its GPUs report no
    # utilization of their own.
    slice_devices = [slice_device(s, latest.get(s.uuid), now) for s in pieces]
    charted = slice_devices + devices if host.kind == HostKind.MIG else devices + slice_devices
    nvlink = nvlink_groups(host.nvlink_group, [(g.index, g.nvlink_group) for g in gpus])
    context = {
        "host": host,
        "nvlink": nvlink,
        "nvlink_most": max(map(len, nvlink.values()), default=0),
        "nvlink_text": nvlink_text(nvlink),
        "agent": AgentState.objects.filter(host=host).first(),
        "devices": devices,
        "slices": [
            {"slice": s, "tile": charts.tile(latest[s.uuid].metrics) if s.uuid in latest else None}
            for s in pieces
        ],
        "events": GpuEvent.objects.filter(host=host, kind__in=HEALTH_EVENTS).select_related("gpu")[
            :50
        ],
        "alerts": [] if (active := alert_hooks.active()) is None else active.filter(host=host)[:20],
        **health_pages.host_context(host, gpus),
        "panel": panel_config(charted, figures_url=gpu_figures_url(), live={"kind": "host", "id": host.pk}),
        "live": {
            "subscribe": [{"kind": "host", "id": host.pk}],
            "stale_after_s": stale_after_s(),
            "client": charts.client_settings(),
        },
    }
    return render(request, "monitoring/host.html", context)


@policy_required("fleet.view")
def gpu_detail(request, uuid):
    gpu = get_object_or_404(
        Gpu.objects.select_related("host__region", "model", "instance", "team").annotate(**HOLDER_JOB), uuid=uuid
    )
    now = timezone.now()
    latest = GpuLatest.objects.filter(uuid=uuid).first()
    device = gpu_device(gpu, latest, now, figures.sliced_util(now, [gpu.pk]).get(gpu.pk))
    pieces = list(gpu.slices.select_related("profile__gpu_model", "instance", "team"))
    slice_latest = latest_by_uuid(GpuLatest.objects.filter(gpu=gpu, slice__isnull=False))
    devices = [device] + [slice_device(s, slice_latest.get(s.uuid), now) for s in pieces]
    context = {
        "gpu": gpu,
        "device": device,
        "metrics": latest.metrics if latest else {},
        "procs": process_rows(gpu.pk, device["memory_total"]),
        "slices": pieces,
        "holder": holder(gpu, pieces),
        "events": GpuEvent.objects.filter(gpu=gpu, kind__in=HEALTH_EVENTS)[:50],
        "alerts": [] if (every := alert_hooks.alerts()) is None else every.filter(gpu=gpu).order_by("-opened_at")[:20],
        **health_pages.gpu_context(gpu),
        "panel": panel_config(devices, figures_url=gpu_figures_url(), live={"kind": "host", "id": gpu.host_id}),
        "live": {
            "subscribe": [],
            "stale_after_s": stale_after_s(),
            "client": charts.client_settings(),
        },
    }
    return render(request, "monitoring/gpu.html", context)


def process_rows(
    gpu_id: int, memory_total: int, *, slice_id: int | None = None, instance_id: int | None = None
) -> list[dict]:
    """The processes of the device's newest reading that listed them, largest first.

    With ``instance_id``, only readings attributed to that instance (taken while it held
    the device): another tenant's processes from before a handover never show."""
    readings = Sample.objects.filter(
        gpu_id=gpu_id, slice_id=slice_id, time__gte=timezone.now() - timedelta(hours=1)
    )
    if instance_id is not None:
        readings = readings.filter(instance_id=instance_id)
    # SM use per process comes with the slower counter reads: take each PID's newest
    # from the recent readings, the rest from the newest one.
    recent = list(readings.exclude(procs=None).order_by("-time").values("procs", "time")[:PROC_LOOKBACK])
    if not recent:
        return []
    newest = recent[0]
    sm_by_pid: dict[int, float] = {}
    for reading in recent:
        for proc in reading["procs"] or []:
            if proc.get("sm_util") is not None:
                sm_by_pid.setdefault(proc.get("pid"), proc["sm_util"])
    rows = []
    for proc in sorted(
        newest["procs"] or [], key=lambda p: p.get("used_memory") or 0, reverse=True
    ):
        used = proc.get("used_memory")
        rows.append(
            {
                "pid": proc.get("pid"),
                "name": proc.get("name", ""),
                "user": proc.get("user", ""),
                "cmd": proc.get("cmd", ""),
                "cgroup": proc.get("cgroup", ""),
                "sm_util": sm_by_pid.get(proc.get("pid")),
                "gib": None if used is None else round(used / GIB, 2),
                "pct": None
                if used is None or not memory_total
                else round(100 * used / memory_total, 1),
                "time": newest["time"],
            }
        )
    return rows
