"""Every chart names its axes with units, so a reader never guesses the scale."""

import plotly.graph_objects as go
import pytest

from monitoring import charts

SERIES = {
    "gpu_util": {
        "t": ["2026-12-02T10:00:00Z", "2026-12-02T10:00:01Z"],
        "avg": [40, 60],
        "min": [30, 50],
        "max": [50, 70],
    },
    "mem_used": {
        "t": ["2026-12-02T10:00:00Z"],
        "avg": [2 * charts.GIB],
        "min": [2 * charts.GIB],
        "max": [2 * charts.GIB],
    },
    "power_mw": {
        "t": ["2026-12-02T10:00:00Z"],
        "avg": [350_000],
        "min": [300_000],
        "max": [400_000],
    },
    "temp_c": {"t": ["2026-12-02T10:00:00Z"], "avg": [55], "min": [54], "max": [56]},
    "sm_clock_mhz": {"t": ["2026-12-02T10:00:00Z"], "avg": [1980], "min": [1980], "max": [1980]},
}


def all_figures():
    figures = charts.gpu_figures(
        SERIES, memory_total=80 * charts.GIB, power_limit_mw=700_000, alert_c=85
    )
    figures["heatmap"] = charts.heatmap_figure([("h1", [10, 90])])
    figures["capacity"] = charts.capacity_figure([{"model": "H100-80GB", "used": 3, "free": 5, "other": 2}])
    figures["ecc"] = charts.ecc_figure({})
    return figures


@pytest.mark.parametrize("name", list(all_figures()))
def test_every_axis_has_a_title_with_its_unit_or_category(name):
    fig = all_figures()[name]
    for axis in ("xaxis", "yaxis"):
        title = fig["layout"][axis]["title"]["text"]
        assert title, f"{name} {axis} has no title"
    assert fig["layout"]["title"]["text"]


def test_time_axes_say_utc():
    for name, fig in charts.gpu_figures(SERIES).items():
        assert fig["layout"]["xaxis"]["title"]["text"] == "Time (UTC)", name


def test_value_axes_carry_units():
    figures = charts.gpu_figures(SERIES)
    units = {name: fig["layout"]["yaxis"]["title"]["text"] for name, fig in figures.items()}
    assert units == {
        "utilization": "Percent (%)",
        "memory": "Memory (GiB)",
        "power": "Power (W)",
        "temperature": "Temperature (°C)",
        "clocks": "Clock (MHz)",
    }


@pytest.mark.parametrize("name", list(all_figures()))
def test_plotly_accepts_the_figure(name):
    fig = all_figures()[name]
    go.Figure(data=fig["data"], layout=fig["layout"])
