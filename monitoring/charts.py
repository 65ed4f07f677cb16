"""Plotly figures as pure functions: data in, figure dict out. The one place a chart's
look and data are put together: the browser (static/monitoring/panel.js) draws these
figures as they come and only extends their traces with live readings.

Series come in the metrics API's shape, ``{metric: {"t": [iso…], "avg": […],
"min": […], "max": […]}}``. Every trace the GPU may report is present (``finish``
hides those without readings; a live reading reveals one). Every trace that draws a
metric carries ``meta = {"metric", "stat", "scale", "gap_s"}`` so that the browser can
extend it from live samples without knowing how the figure was built (value shown =
value × scale): a reading further than ``gap_s`` after the previous one starts a new
line after a gap, as in the history (``gap_after_s``). Times are UTC, drawn without a
zone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from instances.models import reports_gpm

GIB = 1024**3

PALETTE = {
    "text": "#e6edf3",
    "muted": "#8b98a5",
    "grid": "#2a3642",
    "panel": "#171e26",
    "bg": "#0f1419",
    "accent": "#4fb3ff",
    "ok": "#3fb950",
    "warn": "#d29922",
    "bad": "#f85149",
    "violet": "#a371f7",
    "pink": "#f778ba",
    "teal": "#39c5cf",
    "dim": "#6e7681",
}

# NVML clock event reasons (nvmlClocksEventReason*). Idle is not a slowdown.
CLOCK_IDLE = 0x1
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x2, "application clocks setting"),
    (0x4, "software power cap"),
    (0x8, "hardware slowdown"),
    (0x10, "sync boost"),
    (0x20, "software thermal slowdown"),
    (0x40, "hardware thermal slowdown"),
    (0x80, "hardware power brake"),
    (0x100, "display clock setting"),
)
# The reasons that mean "the GPU ran slower than it could"; the others are settings.
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

# Tile colour levels: (metric, warn at, bad at).
TILE_LEVELS = {"temp_c": (80, 87), "power_pct": (90, 98), "mem_pct": (90, 97)}

# A silence longer than this many typical steps between readings is drawn as a gap.
GAP_STEPS = 3
# …and never shorter than this (live readings arrive coalesced, a little irregular).
GAP_FLOOR_S = 2.0
# One colour per device where an instance's GPUs are overlaid on one chart.
SERIES_COLORS = ("#4fb3ff", "#3fb950", "#d29922", "#f85149", "#a371f7", "#39c5cf", "#f778ba", "#9fd356")
EMPTY_NOTE = {
    "name": "empty",
    "xref": "paper",
    "yref": "paper",
    "x": 0.5,
    "y": 0.5,
    "showarrow": False,
    "text": "No readings in this range",
    "font": {"size": 13, "color": PALETTE["muted"]},
}

CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d", "toImage"],
}


# --- small pieces -----------------------------------------------------------------


def plot_time(value: str | datetime) -> str:
    """An ISO 8601 time (any zone) as a UTC wall-clock string plotly reads as-is."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(sep=" ", timespec="milliseconds")


def _scaled(values: Iterable, scale: float) -> list:
    if scale == 1:
        return [None if v is None else v for v in values]
    return [None if v is None else round(v * scale, 4) for v in values]


def _when(value: str | datetime) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


def gap_after_s(times: Sequence) -> float | None:
    """The silence after which a line breaks: ``GAP_STEPS`` × the median step between
    readings (at least ``GAP_FLOOR_S``); None with too few readings to tell."""
    if len(times) < 3:
        return None
    moments = [_when(t).timestamp() for t in times]
    steps = sorted(b - a for a, b in zip(moments, moments[1:], strict=False))
    return max(GAP_STEPS * steps[len(steps) // 2], GAP_FLOOR_S)


def with_gaps(times: Sequence, values: list, gap_s: float | None) -> tuple[list, list]:
    """Plot times and values with a None between readings more than ``gap_s`` apart,
    so that a silent agent shows as a gap rather than a straight line across it."""
    x, y = [], []
    previous = None
    for t, v in zip(times, values, strict=True):
        moment = _when(t)
        if gap_s is not None and previous is not None and (moment - previous).total_seconds() > gap_s:
            x.append(plot_time(previous + (moment - previous) / 2))
            y.append(None)
        x.append(plot_time(moment))
        y.append(v)
        previous = moment
    return x, y


def layout(
    title: str, y_title: str, *, y_range: Sequence[float] | None = None, height: int = 290
) -> dict:
    """The shared look: dark, compact, titled axes, legend on top, UTC time axis."""
    y_axis = {
        "title": {"text": y_title},
        "gridcolor": PALETTE["grid"],
        "zerolinecolor": PALETTE["grid"],
        "rangemode": "tozero",
        "fixedrange": True,
    }
    if y_range is not None:
        y_axis["range"] = list(y_range)
        y_axis.pop("rangemode")
    return {
        "title": {
            "text": title,
            "x": 0.01,
            "xanchor": "left",
            "y": 0.98,
            "yanchor": "top",
            "yref": "container",
            "font": {"size": 14},
        },
        "height": height,
        "margin": {"l": 60, "r": 16, "t": 58, "b": 48},
        "paper_bgcolor": PALETTE["panel"],
        "plot_bgcolor": PALETTE["bg"],
        "font": {"color": PALETTE["text"], "size": 12},
        "hovermode": "x unified",
        "showlegend": True,
        "legend": {
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": 1.0,
            "yanchor": "bottom",
            "font": {"size": 11},
            "bgcolor": "rgba(0,0,0,0)",
        },
        "xaxis": {
            "title": {"text": "Time (UTC)"},
            "type": "date",
            "gridcolor": PALETTE["grid"],
            "zeroline": False,
        },
        "yaxis": y_axis,
        "shapes": [],
        "annotations": [],
        "uirevision": "keep",
    }


def line(
    series: dict,
    metric: str,
    name: str,
    *,
    unit: str,
    color: str,
    scale: float = 1,
    stat: str = "avg",
    dash: str = "solid",
    width: float = 2,
) -> dict:
    """One metric's ``stat`` as a line; empty when the metric has no data."""
    points = (series or {}).get(metric) or {}
    times = points.get("t") or ()
    gap = gap_after_s(times)
    x, y = with_gaps(times, _scaled(points.get(stat) or (), scale), gap)
    return {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "x": x,
        "y": y,
        "line": {"color": color, "width": width, "dash": dash, "shape": "linear"},
        "hovertemplate": f"%{{y:.1f}} {unit}<extra>{name}</extra>",
        "connectgaps": False,
        "meta": {"metric": metric, "stat": stat, "scale": scale, "gap_s": gap},
    }


def band(series: dict, metric: str, name: str, *, color: str, scale: float = 1) -> list[dict]:
    """The min and max of each bucket as two faint lines around the average.

    Lines rather than a filled band: plotly fills across gaps, and a gap (an agent
    that was down) must stay visible. On raw samples min = max = avg, so the browser
    hides them there.
    """
    points = (series or {}).get(metric) or {}
    times = points.get("t") or ()
    gap = gap_after_s(times)
    x, upper_y = with_gaps(times, _scaled(points.get("max") or (), scale), gap)
    lower_y = with_gaps(times, _scaled(points.get("min") or (), scale), gap)[1]
    common = {
        "type": "scatter",
        "mode": "lines",
        "x": x,
        "line": {"width": 1, "color": alpha(color, 0.45)},
        "hoverinfo": "skip",
        "showlegend": False,
        "connectgaps": False,
    }
    upper = common | {
        "name": f"{name} max",
        "y": upper_y,
        "meta": {"metric": metric, "stat": "max", "scale": scale, "envelope": True, "gap_s": gap},
    }
    lower = common | {
        "name": f"{name} min",
        "y": lower_y,
        "meta": {"metric": metric, "stat": "min", "scale": scale, "envelope": True, "gap_s": gap},
    }
    return [upper, lower]


def alpha(hex_color: str, opacity: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{opacity})"


def level_line(value: float, label: str, *, color: str) -> tuple[dict, dict]:
    """A dashed horizontal line across the plot, and its label."""
    shape = {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "yref": "y",
        "y0": value,
        "y1": value,
        "line": {"color": color, "width": 1.5, "dash": "dash"},
    }
    note = {
        "xref": "paper",
        "x": 1,
        "xanchor": "right",
        "yref": "y",
        "y": value,
        "yanchor": "bottom",
        "text": label,
        "showarrow": False,
        "font": {"size": 11, "color": color},
    }
    return shape, note


def figure(data: list[dict], fig_layout: dict, *, name: str, unit: str) -> dict:
    return {"data": data, "layout": fig_layout, "config": CONFIG, "name": name, "unit": unit}


# --- GPU charts -------------------------------------------------------------------


def utilization_figure(series: dict) -> dict:
    """GPU utilization, next to tensor-core activity and SM occupancy where reported.

    Utilization alone misleads (a memory copy reads 100%), so the GPM metrics sit
    beside it whenever the GPU reports them.
    """
    data = band(series, "gpu_util", "GPU utilization", color=PALETTE["accent"])
    data.append(line(series, "gpu_util", "GPU utilization", unit="%", color=PALETTE["accent"]))
    for metric, name, color in (
        ("tensor_active_pct", "Tensor-core activity", PALETTE["violet"]),
        ("sm_occupancy_pct", "SM occupancy", PALETTE["ok"]),
    ):
        data.append(line(series, metric, name, unit="%", color=color))
    return figure(
        data, layout("Utilization", "Percent (%)", y_range=(0, 105)), name="utilization", unit="%"
    )


def tflops_figure(series: dict, *, peak_tflops: float | None = None, precision: str | None = None) -> dict:
    """Achieved TFLOP/s, estimated from tensor activity (monitoring/flops.py), against
    the device's dense peak at the instance's precision; ``precision`` (its words, e.g.
    "bf16, assumed") goes in the title, since a wrong one is off by up to 2×."""
    data = band(series, "tflops_est", "Achieved TFLOP/s (est.)", color=PALETTE["violet"])
    data.append(line(series, "tflops_est", "Achieved TFLOP/s (est.)", unit="TFLOP/s", color=PALETTE["violet"]))
    fig_layout = layout(f"Achieved TFLOP/s (estimate{f', {precision}' if precision else ''})", "TFLOP/s")
    if peak_tflops:
        shape, note = level_line(round(peak_tflops, 1), f"dense peak {peak_tflops:.0f}", color=PALETTE["muted"])
        fig_layout["shapes"].append(shape)
        fig_layout["annotations"].append(note)
        fig_layout["yaxis"]["range"] = [0, peak_tflops * 1.08]
        fig_layout["yaxis"].pop("rangemode", None)
    return figure(data, fig_layout, name="tflops", unit="TFLOP/s")


def memory_figure(series: dict, *, memory_total: int | None = None) -> dict:
    """Memory used, in GiB, against the GPU's total."""
    scale = 1 / GIB
    data = [line(series, "mem_used", "Memory used", unit="GiB", color=PALETTE["teal"], scale=scale)]
    data[0] |= {"fill": "tozeroy", "fillcolor": alpha(PALETTE["teal"], 0.15)}
    fig_layout = layout("Memory used", "Memory (GiB)")
    if memory_total:
        total = round(memory_total / GIB, 1)
        shape, note = level_line(total, f"total {total:g} GiB", color=PALETTE["muted"])
        fig_layout["shapes"].append(shape)
        fig_layout["annotations"].append(note)
        fig_layout["yaxis"]["range"] = [0, total * 1.08]
        fig_layout["yaxis"].pop("rangemode", None)
    return figure(data, fig_layout, name="memory", unit="GiB")


def power_figure(series: dict, *, power_limit_mw: int | None = None) -> dict:
    """Power draw in watts (min…max band, average line) against the power limit."""
    scale = 1 / 1000
    data = band(series, "power_mw", "Power", color=PALETTE["warn"], scale=scale)
    data.append(line(series, "power_mw", "Power", unit="W", color=PALETTE["warn"], scale=scale))
    fig_layout = layout("Power", "Power (W)")
    if power_limit_mw:
        limit = power_limit_mw / 1000
        shape, note = level_line(limit, f"limit {limit:g} W", color=PALETTE["bad"])
        fig_layout["shapes"].append(shape)
        fig_layout["annotations"].append(note)
        fig_layout["yaxis"]["range"] = [0, limit * 1.1]
        fig_layout["yaxis"].pop("rangemode", None)
    return figure(data, fig_layout, name="power", unit="W")


def temperature_figure(series: dict, *, alert_c: float | None = None) -> dict:
    """GPU temperature in °C, with the alert threshold when one is set."""
    data = band(series, "temp_c", "Temperature", color=PALETTE["pink"])
    data.append(line(series, "temp_c", "Temperature", unit="°C", color=PALETTE["pink"]))
    fig_layout = layout("Temperature", "Temperature (°C)")
    if alert_c is not None:
        shape, note = level_line(alert_c, f"alert {alert_c:g} °C", color=PALETTE["bad"])
        fig_layout["shapes"].append(shape)
        fig_layout["annotations"].append(note)
        fig_layout["yaxis"]["range"] = [0, max(alert_c + 10, 100)]
        fig_layout["yaxis"].pop("rangemode", None)
    return figure(data, fig_layout, name="temperature", unit="°C")


def throttle_names(mask: int | None) -> list[str]:
    """The clock event reasons set in ``mask``, idle left out."""
    if not mask:
        return []
    return [name for bit, name in THROTTLE_REASONS if int(mask) & bit]


def _seconds(t) -> float:
    if isinstance(t, str):
        t = datetime.fromisoformat(t.replace("Z", "+00:00"))
    return t.timestamp()


def throttle_segments(
    times: Sequence, masks: Sequence, *, gap_s: float | None = None
) -> list[dict]:
    """Runs of equal non-idle clock event reasons: ``[{"start", "end", "mask", "reasons"}]``.

    A run ends at the next reading whose reasons differ (or at its own last reading).
    With ``gap_s``, readings more than that apart never share a run, so that only
    throttled readings may be passed in.
    """
    segments: list[dict] = []
    current = None
    previous = None
    for t, mask in zip(times, masks, strict=True):
        reasons = (int(mask) & ~CLOCK_IDLE) if mask is not None else 0
        broken = (
            gap_s is not None and previous is not None and _seconds(t) - _seconds(previous) > gap_s
        )
        previous = t
        if current is not None and broken:
            segments.append(current)
            current = None
        if current is not None and reasons == current["mask"]:
            current["end"] = t
            continue
        if current is not None:
            current["end"] = t
            segments.append(current)
            current = None
        if reasons:
            current = {"start": t, "end": t, "mask": reasons, "reasons": throttle_names(reasons)}
    if current is not None:
        segments.append(current)
    return segments


def clock_figure(
    series: dict, *, throttle: Sequence[dict] = (), max_clock_mhz: int | None = None
) -> dict:
    """SM clock in MHz with each run of throttle reasons shaded and named.

    Slowdowns (power cap, thermal, hardware) are shaded red; clock settings amber.
    Hovering the marker row at the top names the reasons.
    """
    data = [line(series, "sm_clock_mhz", "SM clock", unit="MHz", color=PALETTE["accent"])]
    data.append(
        line(series, "mem_clock_mhz", "Memory clock", unit="MHz", color=PALETTE["muted"], width=1.5)
    )
    fig_layout = layout("SM clock and throttle reasons", "Clock (MHz)")
    if max_clock_mhz:
        shape, note = level_line(max_clock_mhz, f"max {max_clock_mhz} MHz", color=PALETTE["muted"])
        fig_layout["shapes"].append(shape)
        fig_layout["annotations"].append(note)
    marks = {"x": [], "text": [], "color": []}
    for seg in throttle:
        slowdown = bool(seg["mask"] & SLOWDOWN_MASK)
        color = PALETTE["bad"] if slowdown else PALETTE["warn"]
        start, end = plot_time(seg["start"]), plot_time(seg["end"])
        fig_layout["shapes"].append(
            {
                "type": "rect",
                "xref": "x",
                "x0": start,
                "x1": end,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "fillcolor": alpha(color, 0.16),
                "line": {"width": 0},
                "layer": "below",
            }
        )
        marks["x"].append(start)
        marks["text"].append(", ".join(seg["reasons"]))
        marks["color"].append(color)
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "Throttle reasons",
            "x": marks["x"],
            "y": [1] * len(marks["x"]),
            "yaxis": "y2",
            "text": marks["text"],
            "marker": {
                "symbol": "triangle-down",
                "size": 10,
                "color": marks["color"] or PALETTE["bad"],
            },
            "hovertemplate": "%{text}<extra>throttled</extra>",
            "meta": {"metric": "clocks_event_reasons", "stat": "throttle", "scale": 1},
        }
    )
    fig_layout["yaxis2"] = {
        "overlaying": "y",
        "range": [0, 1.05],
        "visible": False,
        "fixedrange": True,
    }
    return figure(data, fig_layout, name="clocks", unit="MHz")


def gpu_figures(
    series: dict,
    *,
    memory_total: int | None = None,
    power_limit_mw: int | None = None,
    max_clock_mhz: int | None = None,
    alert_c: float | None = None,
    throttle: Sequence[dict] = (),
    peak_tflops: float | None = None,
    tflops_precision: str | None = None,
) -> dict[str, dict]:
    """Every chart of one GPU's detail view, in page order (achieved TFLOP/s only where
    an estimate has a basis)."""
    tflops = {"tflops": tflops_figure(series, peak_tflops=peak_tflops, precision=tflops_precision)} \
        if peak_tflops else {}
    return {
        "utilization": utilization_figure(series),
        **tflops,
        "memory": memory_figure(series, memory_total=memory_total),
        "power": power_figure(series, power_limit_mw=power_limit_mw),
        "temperature": temperature_figure(series, alert_c=alert_c),
        "clocks": clock_figure(series, throttle=throttle, max_clock_mhz=max_clock_mhz),
    }


def device_figures(
    series: dict,
    *,
    start: datetime,
    end: datetime,
    live: bool,
    tier: str,
    whole_gpu: bool = True,
    ecc: bool = False,
    reports_activity: bool = True,
    **limits,
) -> dict[str, dict]:
    """The charts of one GPU or slice over [start, end), finished for the panel. A slice
    has no power, temperature or clocks of its own (they belong to the whole GPU), and
    one that reports no activity (an A100's MIG slice) no utilization chart."""
    figures = gpu_figures(series, **limits)
    if ecc:
        figures["ecc"] = ecc_figure(series)
    if not whole_gpu:
        for name in ("power", "temperature", "clocks"):
            figures.pop(name, None)
    if not reports_activity:
        figures.pop("utilization", None)
    return {name: finish(fig, start=start, end=end, live=live, tier=tier) for name, fig in figures.items()}


def overlay_figures(
    devices: Sequence[tuple[str, str, dict]],
    *,
    start: datetime,
    end: datetime,
    live: bool,
    tier: str,
    whole_gpu: bool = True,
    **limits,
) -> dict[str, dict]:
    """Every device of an instance on each chart: the chart's first metric, one line per
    device (``devices`` is ``[(uuid, label, series), …]``), in ``SERIES_COLORS``."""
    frames = device_figures({}, start=start, end=end, live=live, tier=tier, whole_gpu=whole_gpu, **limits)
    out = {}
    for name, frame in frames.items():
        base = next(t for t in frame["data"] if _primary(t))
        meta = base["meta"]
        data = []
        for k, (uuid, label, series) in enumerate(devices):
            trace = line(series, meta["metric"], label, unit=frame["unit"], stat=meta["stat"],
                         scale=meta["scale"], color=SERIES_COLORS[k % len(SERIES_COLORS)])
            trace["meta"]["uuid"] = uuid
            data.append(trace)
        fig_layout = frame["layout"]
        fig_layout["annotations"] = [a for a in fig_layout["annotations"] if a.get("name") != "empty"]
        fig_layout["xaxis"].pop("range", None)
        fig = figure(data, fig_layout, name=name, unit=frame["unit"])
        out[name] = finish(fig, start=start, end=end, live=live, tier=tier)
    return out


def _primary(trace: dict) -> bool:
    meta = trace.get("meta") or {}
    return bool(meta.get("metric")) and not meta.get("envelope") and meta.get("stat") != "throttle"


def finish(fig: dict, *, start: datetime, end: datetime, live: bool, tier: str) -> dict:
    """A figure as the panel shows it: traces without readings hidden (a live reading
    reveals one), min/max lines hidden on raw samples (there min = max = avg), a past
    range drawn over its whole window and an empty chart over the requested one (never
    plotly's default, the year 2000) with a note."""
    any_data = False
    for trace in fig["data"]:
        meta = trace.get("meta") or {}
        if not meta.get("metric") or meta.get("stat") == "throttle":
            continue
        has = any(v is not None for v in trace.get("y") or ())
        any_data = any_data or has
        if not has or (tier == "raw" and meta.get("envelope")):
            trace["visible"] = False
    fig_layout = fig["layout"]
    if not live or not any_data:
        fig_layout["xaxis"]["range"] = [plot_time(start), plot_time(end)]
    if not any_data:
        fig_layout["annotations"].append(dict(EMPTY_NOTE))
    fig["empty"] = not any_data
    return fig


# Metrics a GPU view asks the metrics API for.
GPU_METRICS = (
    "gpu_util",
    "tensor_active_pct",
    "sm_occupancy_pct",
    "mem_used",
    "power_mw",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "tflops_est",
)


ECC_METRICS = ("ecc_corrected_volatile", "ecc_uncorrected_volatile")


def ecc_figure(series: dict) -> dict:
    """ECC error counts since the driver loaded: corrected (amber), uncorrected (red)."""
    data = [
        line(
            series,
            "ecc_corrected_volatile",
            "Corrected",
            unit="errors",
            color=PALETTE["warn"],
            stat="max",
        ),
        line(
            series,
            "ecc_uncorrected_volatile",
            "Uncorrected",
            unit="errors",
            color=PALETTE["bad"],
            stat="max",
        ),
    ]
    for trace in data:
        trace["line"]["shape"] = "hv"
    return figure(data, layout("ECC errors", "Errors (count)"), name="ecc", unit="errors")


# --- fleet -----------------------------------------------------------


def heatmap_figure(
    rows: Sequence[tuple[str, Sequence[float | None]]], *, title: str = "GPU utilization"
) -> dict:
    """Hosts (rows) × GPU index (columns), coloured by utilization 0–100%.

    ``rows`` is ``[(host name, [utilization per GPU index, None when unknown]), …]``.
    """
    width = max((len(values) for _, values in rows), default=0)
    z = [list(values) + [None] * (width - len(values)) for _, values in rows]
    hosts = [name for name, _ in rows]
    fig_layout = layout(title, "Host", height=max(180, 60 + 22 * len(rows)))
    fig_layout["xaxis"] = {
        "title": {"text": "GPU index"},
        "dtick": 1,
        "side": "top",
        "fixedrange": True,
        "gridcolor": PALETTE["grid"],
    }
    fig_layout["yaxis"] = {
        "title": {"text": "Host"},
        "autorange": "reversed",
        "fixedrange": True,
        "automargin": True,
        "type": "category",
    }
    fig_layout["margin"] = {"l": 10, "r": 10, "t": 56, "b": 16}
    fig_layout["hovermode"] = "closest"
    fig_layout["showlegend"] = False
    data = [
        {
            "type": "heatmap",
            "x": list(range(width)),
            "y": hosts,
            "z": z,
            "zmin": 0,
            "zmax": 100,
            "xgap": 2,
            "ygap": 2,
            "hoverongaps": False,
            "colorscale": [
                [0, "#1b2a38"],
                [0.25, "#1f6feb"],
                [0.6, "#3fb950"],
                [0.85, "#d29922"],
                [1, "#f85149"],
            ],
            "colorbar": {
                "title": {"text": "GPU util (%)", "side": "right"},
                "thickness": 12,
                "len": 0.9,
            },
            "hovertemplate": "%{y} gpu%{x}: %{z:.0f}%<extra></extra>",
            "meta": {"metric": "gpu_util", "stat": "heatmap", "scale": 1},
        }
    ]
    return figure(data, fig_layout, name="heatmap", unit="%")


def capacity_figure(rows: Sequence[dict]) -> dict:
    """Used, free and other GPUs per model as stacked horizontal bars.

    ``rows`` is ``[{"model", "used", "free", "other"}, …]``.
    """
    models = [r["model"] for r in rows]
    bar = {"type": "bar", "orientation": "h", "y": models}
    data = [
        bar
        | {
            "name": "Used",
            "x": [r["used"] for r in rows],
            "marker": {"color": PALETTE["accent"]},
            "hovertemplate": "%{y}: %{x} used<extra></extra>",
        },
        bar
        | {
            "name": "Free",
            "x": [r["free"] for r in rows],
            "marker": {"color": PALETTE["grid"]},
            "hovertemplate": "%{y}: %{x} free<extra></extra>",
        },
        bar
        | {
            "name": "Not launchable whole",
            "x": [r["other"] for r in rows],
            "marker": {"color": PALETTE["muted"], "opacity": 0.5},
            "hovertemplate": "%{y}: %{x} not free whole (MIG/vGPU mode or host not active)<extra></extra>",
        },
    ]
    fig_layout = layout("Capacity by GPU model", "GPU model", height=max(160, 90 + 34 * len(rows)))
    fig_layout["barmode"] = "stack"
    fig_layout["xaxis"] = {
        "title": {"text": "GPUs"},
        "gridcolor": PALETTE["grid"],
        "fixedrange": True,
        "rangemode": "tozero",
    }
    fig_layout["yaxis"] = {
        "title": {"text": "GPU model"},
        "automargin": True,
        "fixedrange": True,
        "type": "category",
    }
    fig_layout["hovermode"] = "closest"
    return figure(data, fig_layout, name="capacity", unit="GPUs")


# --- tiles --------------------------------------------------------------------------


def _busy_level(util: float | None) -> str:
    if util is None:
        return "unknown"
    return "idle" if util < 5 else "low" if util < 50 else "busy"


def _level(value: float | None, warn: float, bad: float) -> str:
    if value is None:
        return "unknown"
    if value >= bad:
        return "bad"
    if value >= warn:
        return "warn"
    return "ok"


NOT_YET = (
    "not yet",
    "Tensor-core activity comes with the slower readings, every few seconds; "
    "if none comes, this GPU or its driver does not report it.",
)


def tensor_absence(
    *, architecture: str = "", model: str = "", host_kind: str = "", slice_kind: str | None = None
) -> tuple[str, str]:
    """What a tile says, and its tooltip, while a device has no tensor-core activity:
    what the device cannot report, else that it has not come yet."""
    if not reports_gpm(architecture):  # nor do its slices
        name = f"The {model} ({architecture})" if model else f"This {architecture} GPU"
        return "not reported", f"{name} does not report tensor-core activity: NVML's GPM metrics need Hopper or newer."
    if slice_kind == "vgpu" or (slice_kind is None and host_kind == "vgpu"):
        return "not reported", "vGPU mode: NVML reports no tensor-core activity per vGPU."
    if slice_kind is None and host_kind == "mig":
        return "per slice", "MIG mode: tensor-core activity is reported per MIG slice, not for the whole GPU."
    return NOT_YET


def tile(
    metrics: dict | None,
    *,
    memory_total: int | None = None,
    power_limit_mw: int | None = None,
    tensor_missing: tuple[str, str] = NOT_YET,
) -> dict:
    """What a GPU tile shows: rounded values with units and a colour level for each.

    ``util_level`` is the utilization bucket (idle/low/busy) used to tint the tile;
    ``tensor_missing`` (text, tooltip) says why tensor activity is absent
    (``tensor_absence``).
    """
    m = metrics or {}
    total = m.get("mem_total") or memory_total
    limit = m.get("power_limit_mw") or power_limit_mw
    util = m.get("gpu_util")
    mem_pct = 100.0 * m["mem_used"] / total if m.get("mem_used") is not None and total else None
    power_pct = 100.0 * m["power_mw"] / limit if m.get("power_mw") is not None and limit else None
    tensor = m.get("tensor_active_pct")
    values = {
        "util": None if util is None else round(util),
        "util_level": _busy_level(util),
        "tensor": None if tensor is None else round(tensor),
        "mem_gib": None if m.get("mem_used") is None else round(m["mem_used"] / GIB, 1),
        "mem_total_gib": None if not total else round(total / GIB),
        "mem_pct": None if mem_pct is None else round(mem_pct),
        "mem_level": _level(mem_pct, *TILE_LEVELS["mem_pct"]),
        "power_w": None if m.get("power_mw") is None else round(m["power_mw"] / 1000),
        "power_limit_w": None if not limit else round(limit / 1000),
        "power_level": _level(power_pct, *TILE_LEVELS["power_pct"]),
        "temp_c": None if m.get("temp_c") is None else round(m["temp_c"]),
        "temp_level": _level(m.get("temp_c"), *TILE_LEVELS["temp_c"]),
        "throttle": throttle_names(int(m.get("clocks_event_reasons") or 0) & SLOWDOWN_MASK),
        "tensor_missing": tensor_missing[0],
        "tensor_missing_title": tensor_missing[1],
    }
    return values | _tile_texts(values)


def _tile_texts(v: dict) -> dict:
    """The tile's lines as shown ("—" when unknown), the same as static/monitoring/live.js."""

    def of(value, *parts):
        return "—" if value is None else "".join(str(p) for p in (value, *parts))

    total = f" / {v['mem_total_gib']}" if v["mem_total_gib"] else ""
    limit = f" / {v['power_limit_w']}" if v["power_limit_w"] else ""
    return {
        "util_text": of(v["util"]),
        "tensor_text": v["tensor_missing"] if v["tensor"] is None else f"{v['tensor']} %",
        "mem_text": of(v["mem_gib"], total, " GiB"),
        "power_text": of(v["power_w"], limit, " W"),
        "temp_text": of(v["temp_c"], " °C"),
        "throttle_text": "throttled: " + ", ".join(v["throttle"]) if v["throttle"] else "",
    }


def client_settings() -> dict:
    """What the browser needs to draw tiles and throttle marks like the server does."""
    return {
        "throttle": [[bit, name] for bit, name in THROTTLE_REASONS],
        "slowdown_mask": SLOWDOWN_MASK,
        "levels": TILE_LEVELS,
        "gib": GIB,
        "palette": PALETTE,
    }
