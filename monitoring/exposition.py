"""/metrics: the latest reading of every GPU in Prometheus text format, under
dcgm-exporter's metric names and labels, so existing Grafana dashboards work.

Labels as dcgm-exporter writes them (``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, the GPU's host as ``instance``, ``hostname`` and ``Hostname``, and
``GPU_I_ID``/``GPU_I_PROFILE`` on MIG slices, whose ``UUID`` and ``gpu`` are their
parent's), plus ``team``, ``console_instance`` (the console instance's name) and
``instance_id``. Units follow DCGM: MiB, W, mJ, ratios 0-1 for
the profiling (GPM) fields. A GPU whose agent went quiet keeps only
``gpuconsole_gpu_stale 1``: Prometheus then marks its DCGM series stale. The fleet's
scrape also carries each GPU's health verdict (``gpuconsole_gpu_health``) and cordon.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import Count, F, OuterRef, Subquery
from django.utils import timezone

from . import alert_hooks
from .models import AgentState, GpuEvent, GpuLatest, stale_after_s

MIB = 1024 * 1024
HEALTH_VALUE = {"healthy": 0, "degraded": 1, "failed": 2}


@dataclass(frozen=True)
class Field:
    name: str
    help: str
    value: Callable[[dict, GpuLatest], float | None]
    kind: str = "gauge"


def _m(key: str, scale: float = 1.0):
    def read(m: dict, row: GpuLatest):
        value = m.get(key)
        return None if value is None else value * scale
    return read


def _fb_free(m: dict, row: GpuLatest):
    used = m.get("mem_used")
    total = m.get("mem_total") or (row.slice is None and row.gpu.memory_total) or None
    return None if used is None or not total else max(0, total - used) / MIB


FIELDS = [
    Field("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", _m("gpu_util")),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", _m("mem_util")),
    Field("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", _m("mem_used", 1 / MIB)),
    Field("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _fb_free),
    Field("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", _m("power_mw", 1 / 1000)),
    Field("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", _m("power_limit_mw", 1 / 1000)),
    Field("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", _m("temp_c")),
    Field("DCGM_FI_DEV_FAN_SPEED", "Fan speed (in %).", _m("fan_pct")),
    Field("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", _m("sm_clock_mhz")),
    Field("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", _m("mem_clock_mhz")),
    Field("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock event (throttle) reasons (bitmask).", _m("clocks_event_reasons")),
    Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", _m("energy_mj"), "counter"),
    Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", _m("ecc_corrected_volatile"), "counter"),
    Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", _m("ecc_uncorrected_volatile"), "counter"),
    Field("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", _m("sm_occupancy_pct", 0.01)),
    Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", _m("tensor_active_pct", 0.01)),
    Field("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.", _m("dram_bw_util_pct", 0.01)),
    Field("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", lambda m, row: row.last_xid),
]


def escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels(pairs: Iterable[tuple[str, object]]) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs) + "}"


def number(value) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def gpu_labels(row: GpuLatest) -> list[tuple[str, object]]:
    gpu = row.gpu
    pairs = [
        ("gpu", gpu.index), ("UUID", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id), ("device", f"nvidia{gpu.index}"),
        ("modelName", gpu.model.name), *host_labels(row.host.name),
    ]
    if row.slice is not None:
        pairs += [("GPU_I_PROFILE", row.slice.profile.name), ("GPU_I_ID", row.slice.gpu_instance_id)]
    pairs += [
        ("team", row.team.slug if row.team else ""),
        ("console_instance", row.instance.name if row.instance else ""),
        ("instance_id", row.instance_id or ""),
        ("console_job", row.job_name or ""),
    ]
    return pairs


def host_labels(name: str) -> list[tuple[str, str]]:
    # dcgm-exporter's dashboards select hosts by `instance`; its newer releases label
    # `hostname`, older dashboards `Hostname`.
    return [("Hostname", name), ("hostname", name), ("instance", name)]


def rows():
    last_xid = GpuEvent.objects.filter(gpu=OuterRef("gpu"), kind="xid").order_by("-time", "-id").values("code")[:1]
    return (
        GpuLatest.objects.select_related("host", "gpu__model", "slice__profile", "team", "instance")
        .annotate(last_xid=Subquery(last_xid), job_name=F("instance__job_run__job__name"),
                  health_state=F("gpu__health__state"), cordoned_at=F("gpu__cordoned_at"))
        .order_by("host__name", "gpu__index", "slice__gpu_instance_id")
    )


def render(now=None, *, teams: list[int] | None = None) -> str:
    """The whole exposition, in a fixed number of queries; with ``teams``, only the
    GPUs and slices those teams hold now and their alerts (no host-wide agent series)."""
    now = now or timezone.now()
    after = stale_after_s()
    found = rows() if teams is None else rows().filter(team_id__in=teams)
    readings = [(row, gpu_labels(row), row.is_stale(now, after)) for row in found]
    out: list[str] = []
    for field in FIELDS:
        series = [
            f"{field.name}{labels(pairs)} {number(value)}"
            for row, pairs, stale in readings
            if not stale and (value := field.value(row.metrics or {}, row)) is not None
        ]
        if series:
            out += [f"# HELP {field.name} {field.help}", f"# TYPE {field.name} {field.kind}", *series]
    out += _console_series(readings, now, teams)
    return "\n".join(out) + "\n"


def _console_series(readings, now, teams) -> list[str]:
    out = ["# HELP gpuconsole_gpu_stale 1 when the GPU's agent has sent nothing recently.",
           "# TYPE gpuconsole_gpu_stale gauge"]
    out += [f"gpuconsole_gpu_stale{labels(pairs)} {int(stale)}" for _, pairs, stale in readings]
    out += ["# HELP gpuconsole_gpu_last_seen_seconds Seconds since the GPU's last reading arrived.",
            "# TYPE gpuconsole_gpu_last_seen_seconds gauge"]
    out += [f"gpuconsole_gpu_last_seen_seconds{labels(pairs)} {(now - row.last_seen).total_seconds():.1f}"
            for row, pairs, _ in readings]
    if teams is None:  # health and cordons are the operators' (monitoring/verdicts.py)
        whole = [(row, pairs) for row, pairs, _ in readings if row.slice_id is None]
        out += ["# HELP gpuconsole_gpu_health The GPU's health verdict: 0 healthy, 1 degraded, 2 failed.",
                "# TYPE gpuconsole_gpu_health gauge"]
        out += [f"gpuconsole_gpu_health{labels(pairs)} {HEALTH_VALUE.get(row.health_state, 0)}" for row, pairs in whole]
        out += ["# HELP gpuconsole_gpu_cordoned 1 while the GPU (or its host) takes no new placements.",
                "# TYPE gpuconsole_gpu_cordoned gauge"]
        out += [f"gpuconsole_gpu_cordoned{labels(pairs)} {int(row.cordoned_at is not None or row.host.cordoned_at is not None)}"
                for row, pairs in whole]
    agents = [] if teams is not None else list(AgentState.objects.select_related("host").order_by("host__name"))
    for name, kind, help_, attr in [
        ("gpuconsole_agent_connected", "gauge", "1 while the host's agent is connected.", "connected"),
        ("gpuconsole_agent_samples_total", "counter", "Samples stored from the host's agent.", "samples"),
        ("gpuconsole_agent_duplicates_total", "counter", "Records received again and skipped.", "duplicates"),
        ("gpuconsole_agent_bad_frames_total", "counter", "Frames refused as bad.", "bad_frames"),
    ]:
        out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        out += [f"{name}{labels(host_labels(a.host.name))} {int(getattr(a, attr))}" for a in agents]
    alerts = alert_hooks.active()
    if alerts is not None and teams is not None:
        alerts = alerts.filter(team_id__in=teams)
    counts = [] if alerts is None else alerts.values("kind").annotate(n=Count("id")).order_by("kind")
    out += ["# HELP gpuconsole_alerts_active Open or acknowledged alerts.", "# TYPE gpuconsole_alerts_active gauge"]
    out += [f'gpuconsole_alerts_active{{kind="{row["kind"]}"}} {row["n"]}' for row in counts]
    return out
