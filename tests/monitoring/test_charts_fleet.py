"""The operators' fleet charts: utilization heatmap (hosts × GPUs) and capacity."""

from monitoring import charts


def test_heatmap_has_a_row_per_host_and_a_column_per_gpu_index():
    fig = charts.heatmap_figure([("use1-a", [10, 20, 30]), ("use1-b", [90])])
    heat = fig["data"][0]
    assert heat["y"] == ["use1-a", "use1-b"]
    assert heat["x"] == [0, 1, 2]
    assert heat["z"] == [[10, 20, 30], [90, None, None]]
    assert (heat["zmin"], heat["zmax"]) == (0, 100)


def test_heatmap_grows_with_the_number_of_hosts():
    small = charts.heatmap_figure([("a", [1])])["layout"]["height"]
    big = charts.heatmap_figure([(f"h{i}", [1]) for i in range(100)])["layout"]["height"]
    assert big > small


def test_capacity_stacks_used_free_and_other_per_model():
    fig = charts.capacity_figure(
        [{"model": "A100-80GB", "used": 6, "free": 2, "other": 3}, {"model": "H100-80GB", "used": 1, "free": 7, "other": 0}]
    )
    used, free, other = fig["data"]
    assert (used["name"], used["x"]) == ("Used", [6, 1])
    assert (free["name"], free["x"]) == ("Free", [2, 7])
    assert (other["name"], other["x"]) == ("Not launchable whole", [3, 0])
    assert fig["layout"]["barmode"] == "stack"
