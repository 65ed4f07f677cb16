"""A small model ("embed", "small" in the instance's name) is served from the first of
the instance's GPUs on the host: that one holds a few GB and works a little, the others
idle with no process, as the demo's seeded history has it."""

from agent.backends.sim import SimSource, allocated_kind, apply_allocations

GIB = 2**30


def readings(source, ticks=3):
    out = {}
    for _ in range(ticks):
        for records in source.tick(now=0.0).values():
            for r in records:
                out.setdefault(r["gpu"], []).append(r)
    return out


def test_the_first_gpu_serves_the_model_and_the_others_idle():
    gpus = [{"uuid": f"GPU-{i}", "index": i, "memory_total": 80 * GIB} for i in range(5)]
    source = SimSource.from_fleet([{"host": "h", "token": "t", "gpus": gpus}])
    source.follow("http://console.example")
    held = {"state": "running", "instance": "globex-chat-small"}
    apply_allocations(source.fleet[0], {"GPU-3": held, "GPU-1": held, "GPU-4": held,
                                        "GPU-0": {"state": "running", "instance": "acme-train"}})
    seen = readings(source)
    first = seen["GPU-1"]
    assert all(5 * GIB < r["m"]["mem_used"] < 7 * GIB and r["procs"][0]["pid"] for r in first)
    assert all(0 < r["m"]["sm_occupancy_pct"] <= 10 for r in first if "sm_occupancy_pct" in r["m"])
    for uuid in ("GPU-3", "GPU-4"):
        assert all(r["m"]["gpu_util"] == 0 and r["m"]["mem_used"] < GIB and "procs" not in r for r in seen[uuid])
    assert seen["GPU-0"][0]["m"]["gpu_util"] >= 90  # another instance's rank is its own


def test_a_bigger_model_runs_on_every_gpu():
    assert [allocated_kind(("running", "acme-inference-a", rank)) for rank in (0, 1)] == ["inference"] * 2
    assert [allocated_kind(("running", "acme-embed-api", rank)) for rank in (0, 1)] == ["light", "idle"]
    assert allocated_kind(("stopping", "acme-embed-api", 0)) == "idle"
