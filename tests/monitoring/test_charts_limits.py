"""Power is drawn against the power limit, memory against the total, in real units."""

from monitoring import charts

T = ["2026-12-02T10:00:00Z", "2026-12-02T10:00:01Z"]


def test_power_is_in_watts_against_the_limit():
    series = {
        "power_mw": {
            "t": T,
            "avg": [660_000, 70_500],
            "min": [650_000, 70_000],
            "max": [670_000, 71_000],
        }
    }
    fig = charts.power_figure(series, power_limit_mw=700_000)
    avg = next(t for t in fig["data"] if t["meta"]["stat"] == "avg")
    assert avg["y"] == [660.0, 70.5]
    assert avg["meta"]["scale"] == 0.001
    limit = fig["layout"]["shapes"][0]
    assert (limit["y0"], limit["y1"]) == (700.0, 700.0)
    assert fig["layout"]["annotations"][0]["text"] == "limit 700 W"


def test_power_without_a_known_limit_draws_no_limit_line():
    fig = charts.power_figure({"power_mw": {"t": T, "avg": [1, 2], "min": [1, 2], "max": [1, 2]}})
    assert fig["layout"]["shapes"] == []


def test_memory_is_in_gib_against_the_total():
    series = {"mem_used": {"t": T[:1], "avg": [109 * charts.GIB], "min": [0], "max": [0]}}
    fig = charts.memory_figure(series, memory_total=150754820096)
    assert fig["data"][0]["y"] == [109.0]
    assert fig["layout"]["shapes"][0]["y0"] == 140.4
    assert fig["layout"]["yaxis"]["range"][1] > 140.4


def test_times_are_drawn_as_utc_wall_clock():
    assert charts.plot_time("2026-12-02T10:00:01.5+01:00") == "2026-12-02 09:00:01.500"
    assert charts.plot_time("2026-12-02T10:00:00Z") == "2026-12-02 10:00:00.000"


def test_missing_readings_stay_gaps():
    series = {"temp_c": {"t": T, "avg": [None, 50], "min": [None, 50], "max": [None, 50]}}
    avg = charts.temperature_figure(series)["data"][-1]
    assert avg["y"] == [None, 50]
    assert avg["connectgaps"] is False


def _seconds(*offsets):
    return [f"2026-12-02T10:{m:02d}:{sec:02d}Z" for m, sec in (divmod(o, 60) for o in offsets)]


def test_a_silence_longer_than_three_steps_is_a_gap_not_a_line():
    times = _seconds(0, 1, 2, 3, 60, 61, 62)
    series = {"gpu_util": {"t": times, "avg": [1, 2, 3, 4, 5, 6, 7], "min": [0] * 7, "max": [9] * 7}}
    fig = charts.utilization_figure(series)
    avg = next(t for t in fig["data"] if t["meta"]["stat"] == "avg" and t["meta"]["metric"] == "gpu_util")
    assert avg["y"] == [1, 2, 3, 4, None, 5, 6, 7]
    assert avg["x"][4] == "2026-12-02 10:00:31.500"
    assert avg["meta"]["gap_s"] == 3.0
    upper = next(t for t in fig["data"] if t["meta"]["stat"] == "max")
    assert upper["y"] == [9, 9, 9, 9, None, 9, 9, 9]


def test_steady_readings_have_no_gap():
    times = _seconds(0, 5, 10, 15, 20)
    fig = charts.temperature_figure({"temp_c": {"t": times, "avg": [50] * 5, "min": [50] * 5, "max": [50] * 5}})
    assert None not in fig["data"][-1]["y"] and fig["data"][-1]["meta"]["gap_s"] == 15.0


def test_too_few_readings_to_tell_a_cadence_leave_the_gap_to_the_browser():
    fig = charts.temperature_figure({"temp_c": {"t": T, "avg": [50, 51], "min": [50, 51], "max": [50, 51]}})
    assert fig["data"][-1]["meta"]["gap_s"] is None
