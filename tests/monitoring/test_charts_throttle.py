"""The SM clock chart marks when and why the GPU slowed its clocks."""

from monitoring import charts

T = [f"2026-12-02T10:00:0{i}Z" for i in range(6)]


def test_idle_is_not_a_throttle_reason():
    assert charts.throttle_names(0x1) == []
    assert charts.throttle_names(0x1 | 0x4) == ["software power cap"]


def test_runs_of_equal_reasons_become_one_segment():
    masks = [1, 4, 4, 0x24, 0, 0]
    segments = charts.throttle_segments(T, masks)
    assert [(s["start"], s["end"], s["reasons"]) for s in segments] == [
        (T[1], T[3], ["software power cap"]),
        (T[3], T[4], ["software power cap", "software thermal slowdown"]),
    ]


def test_a_run_that_lasts_to_the_end_closes_at_the_last_reading():
    segments = charts.throttle_segments(T[:3], [0, 0x40, 0x40])
    assert [(s["start"], s["end"]) for s in segments] == [(T[1], T[2])]


def test_segments_are_shaded_and_named_on_the_clock_chart():
    series = {
        "sm_clock_mhz": {
            "t": T,
            "avg": [1980, 1700, 1650, 1600, 1980, 1980],
            "min": [0] * 6,
            "max": [0] * 6,
        }
    }
    segments = charts.throttle_segments(T, [0, 4, 4, 0x8, 0, 0])
    fig = charts.clock_figure(series, throttle=segments, max_clock_mhz=1980)
    rects = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
    assert [(r["x0"], r["x1"]) for r in rects] == [
        ("2026-12-02 10:00:01.000", "2026-12-02 10:00:03.000"),
        ("2026-12-02 10:00:03.000", "2026-12-02 10:00:04.000"),
    ]
    marks = next(t for t in fig["data"] if t["name"] == "Throttle reasons")
    assert marks["text"] == ["software power cap", "hardware slowdown"]


def test_application_clock_settings_are_amber_and_slowdowns_red():
    segments = charts.throttle_segments(T[:3], [0x2, 0x2, 0x20])
    fig = charts.clock_figure({}, throttle=segments)
    colors = [s["fillcolor"] for s in fig["layout"]["shapes"] if s["type"] == "rect"]
    assert colors[0].startswith("rgba(210,153,34")
    assert colors[1].startswith("rgba(248,81,73")


def test_throttled_readings_far_apart_are_separate_runs():
    times = ["2026-12-02T10:00:00Z", "2026-12-02T10:00:01Z", "2026-12-02T10:05:00Z"]
    segments = charts.throttle_segments(times, [4, 4, 4], gap_s=5)
    assert [(s["start"], s["end"]) for s in segments] == [
        (times[0], times[1]),
        (times[2], times[2]),
    ]
