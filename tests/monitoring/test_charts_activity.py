"""Utilization is drawn next to tensor-core activity and SM occupancy where the GPU
reports them, because utilization alone misleads."""

from datetime import UTC, datetime

from monitoring import charts

T = ["2026-12-02T10:00:00Z"]


START, END = datetime(2026, 12, 2, 9, 30, tzinfo=UTC), datetime(2026, 12, 2, 10, 30, tzinfo=UTC)


def names(fig):
    """The legend as a user sees it: traces shown and not kept out of the legend."""
    return [t["name"] for t in fig["data"] if t.get("showlegend", True) and t.get("visible", True)]


def shown(series):
    return charts.finish(charts.utilization_figure(series), start=START, end=END, live=False, tier="raw")


def test_gpm_metrics_sit_beside_utilization_when_reported():
    series = {
        "gpu_util": {"t": T, "avg": [100], "min": [100], "max": [100]},
        "tensor_active_pct": {"t": T, "avg": [0.0], "min": [0.0], "max": [0.0]},
        "sm_occupancy_pct": {"t": T, "avg": [12.5], "min": [12.5], "max": [12.5]},
    }
    assert names(shown(series)) == ["GPU utilization", "Tensor-core activity", "SM occupancy"]


def test_gpus_without_gpm_show_utilization_only():
    series = {
        "gpu_util": {"t": T, "avg": [50], "min": [50], "max": [50]},
        "tensor_active_pct": {"t": [], "avg": [], "min": [], "max": []},
    }
    assert names(shown(series)) == ["GPU utilization"]


def test_a_metric_without_readings_stays_in_the_figure_for_live_readings_to_reveal():
    fig = shown({"gpu_util": {"t": T, "avg": [50], "min": [50], "max": [50]}})
    tensor = next(t for t in fig["data"] if t["name"] == "Tensor-core activity")
    assert tensor["visible"] is False and tensor["meta"]["metric"] == "tensor_active_pct"


def test_utilization_has_a_min_max_band_so_spikes_survive_downsampling():
    series = {"gpu_util": {"t": T, "avg": [20], "min": [0], "max": [100]}}
    traces = [t for t in charts.utilization_figure(series)["data"] if t["meta"]["metric"] == "gpu_util"]
    assert [(t["meta"]["stat"], t["y"]) for t in traces] == [("max", [100]), ("min", [0]), ("avg", [20])]


def test_min_max_lines_are_hidden_on_raw_samples_only():
    series = {"gpu_util": {"t": T, "avg": [20], "min": [0], "max": [100]}}
    for tier, hidden in (("raw", True), ("1m", False)):
        fig = charts.finish(charts.utilization_figure(series), start=START, end=END, live=False, tier=tier)
        envelope = [t for t in fig["data"] if t["meta"].get("envelope")]
        assert all((t.get("visible") is False) == hidden for t in envelope)
