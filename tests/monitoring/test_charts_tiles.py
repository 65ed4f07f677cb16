"""GPU tiles show rounded values with units and colour each by how close it runs to a limit."""

from monitoring import charts


def test_a_hot_gpu_near_its_power_limit_is_red():
    tile = charts.tile(
        {
            "gpu_util": 99.6,
            "temp_c": 88,
            "power_mw": 690_000,
            "power_limit_mw": 700_000,
            "mem_used": 40 * charts.GIB,
            "mem_total": 80 * charts.GIB,
        }
    )
    assert (tile["util"], tile["util_level"]) == (100, "busy")
    assert (tile["temp_c"], tile["temp_level"]) == (88, "bad")
    assert (tile["power_w"], tile["power_limit_w"], tile["power_level"]) == (690, 700, "bad")
    assert (tile["mem_gib"], tile["mem_pct"], tile["mem_level"]) == (40.0, 50, "ok")


def test_an_idle_gpu_holding_memory_is_idle_not_unknown():
    tile = charts.tile({"gpu_util": 0, "mem_used": 109 * charts.GIB}, memory_total=141 * charts.GIB)
    assert tile["util_level"] == "idle"
    assert tile["mem_total_gib"] == 141


def test_a_gpu_that_never_reported_is_unknown():
    tile = charts.tile(None)
    assert tile["util"] is None
    assert {tile["util_level"], tile["temp_level"], tile["power_level"]} == {"unknown"}


def test_only_slowdowns_are_named_on_a_tile():
    assert charts.tile({"clocks_event_reasons": 0x1 | 0x2 | 0x4})["throttle"] == [
        "software power cap"
    ]


def test_tile_lines_read_as_shown_with_a_dash_when_unknown():
    tile = charts.tile(
        {"gpu_util": 40, "mem_used": 2 * charts.GIB, "power_mw": 150_000},
        memory_total=80 * charts.GIB,
    )
    assert (tile["util_text"], tile["mem_text"], tile["power_text"], tile["temp_text"]) == (
        "40",
        "2.0 / 80 GiB",
        "150 W",
        "—",
    )


def test_a_tile_without_tensor_activity_says_why():
    ampere = charts.tensor_absence(architecture="Ampere", model="A100-80GB")
    assert charts.tile({"gpu_util": 40}, tensor_missing=ampere)["tensor_text"] == "not reported"
    assert "A100-80GB (Ampere)" in ampere[1] and "Hopper" in ampere[1]
    assert charts.tile({"gpu_util": 40})["tensor_text"] == "not yet"
    assert charts.tile({"tensor_active_pct": 91.6}, tensor_missing=ampere)["tensor_text"] == "92 %"


def test_vgpu_and_mig_modes_name_their_reason():
    assert charts.tensor_absence(architecture="Hopper", slice_kind="vgpu")[0] == "not reported"
    assert charts.tensor_absence(architecture="Hopper", host_kind="vgpu")[0] == "not reported"
    assert charts.tensor_absence(architecture="Hopper", host_kind="mig")[0] == "per slice"
    # An A100 in MIG mode: its slices have no GPM either, so not "per slice".
    assert charts.tensor_absence(architecture="Ampere", model="A100-80GB", host_kind="mig")[0] == "not reported"
    assert charts.tensor_absence(architecture="Ampere", model="A100-80GB", slice_kind="mig")[0] == "not reported"
    assert charts.tensor_absence(architecture="Hopper", host_kind="mig", slice_kind="mig")[0] == "not yet"
