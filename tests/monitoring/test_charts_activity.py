"""Utilization is drawn next to tensor-core activity and SM occupancy where the GPU
reports them, because utilization alone misleads."""

from monitoring import charts

T = ["2026-12-02T10:00:00Z"]


def names(fig):
    return [trace["name"] for trace in fig["data"] if trace.get("showlegend", True)]


def test_gpm_metrics_sit_beside_utilization_when_reported():
    series = {
        "gpu_util": {"t": T, "avg": [100], "min": [100], "max": [100]},
        "tensor_active_pct": {"t": T, "avg": [0.0], "min": [0.0], "max": [0.0]},
        "sm_occupancy_pct": {"t": T, "avg": [12.5], "min": [12.5], "max": [12.5]},
    }
    assert names(charts.utilization_figure(series)) == [
        "GPU utilization",
        "Tensor-core activity",
        "SM occupancy",
    ]


def test_gpus_without_gpm_show_utilization_only():
    series = {
        "gpu_util": {"t": T, "avg": [50], "min": [50], "max": [50]},
        "tensor_active_pct": {"t": [], "avg": [], "min": [], "max": []},
    }
    assert names(charts.utilization_figure(series)) == ["GPU utilization"]


def test_utilization_has_a_min_max_band_so_spikes_survive_downsampling():
    series = {"gpu_util": {"t": T, "avg": [20], "min": [0], "max": [100]}}
    stats = [trace["meta"]["stat"] for trace in charts.utilization_figure(series)["data"]]
    ys = [trace["y"] for trace in charts.utilization_figure(series)["data"]]
    assert stats == ["max", "min", "avg"]
    assert ys == [[100], [0], [20]]


def test_a_template_holds_every_trace_a_gpu_may_report():
    assert names(charts.utilization_figure({})) == [
        "GPU utilization",
        "Tensor-core activity",
        "SM occupancy",
    ]
