import json
import statistics
import time

import pytest

from agent.backends.sim import FleetError, SimSource, load_fleet


def metrics(source: SimSource, ticks: int) -> list[dict]:
    return [r["m"] for _ in range(ticks) for recs in source.tick(now=0.0).values() for r in recs
            if "m" in r]  # fmt: skip


def test_the_same_seed_gives_the_same_fleet():
    a = SimSource.synthetic(2, 4, seed=7)
    b = SimSource.synthetic(2, 4, seed=7)
    assert metrics(a, 50) == metrics(b, 50)


def test_another_seed_gives_another_fleet():
    assert metrics(SimSource.synthetic(2, 4, seed=1), 20) != metrics(
        SimSource.synthetic(2, 4, seed=2), 20
    )


def test_gpu_uuids_are_stable_across_seeds():
    a = SimSource.synthetic(1, 2, seed=1).hosts()[0].gpus
    b = SimSource.synthetic(1, 2, seed=2).hosts()[0].gpus
    assert [g["uuid"] for g in a] == [g["uuid"] for g in b]


def test_synthetic_hosts_are_numbered():
    hosts = SimSource.synthetic(3, 2).hosts()
    assert [h.host for h in hosts] == ["sim-host-000", "sim-host-001", "sim-host-002"]
    assert hosts[0].gpus[0]["name"] == "H100-80GB"


def test_the_fleet_runs_varied_workloads():
    source = SimSource.synthetic(8, 8, seed=3)
    for _ in range(30):
        source.tick(now=0.0)
    kinds = {g.kind for h in source.fleet for g in h.gpus}
    assert kinds == {"training", "inference", "copy", "held", "idle"}


def test_workloads_look_like_what_they_are():
    source = SimSource.synthetic(8, 8, seed=3)
    seen: dict[str, list[dict]] = {}
    for tick in range(40):
        out = source.tick(now=0.0)
        for host in source.fleet:
            for gpu, record in zip(host.gpus, out[host.host], strict=False):
                if tick % source.slow_every == 0:
                    seen.setdefault(gpu.kind, []).append(record["m"])
    avg = {k: {n: statistics.mean(m[n] for m in ms) for n in ms[0]} for k, ms in seen.items()}
    assert avg["training"]["tensor_active_pct"] > 40 and avg["training"]["power_mw"] > 500_000
    assert avg["copy"]["gpu_util"] > 90 and avg["copy"]["tensor_active_pct"] < 1
    assert avg["held"]["gpu_util"] < 2 and avg["held"]["mem_used"] > 0.6 * 85899345920
    assert avg["idle"]["gpu_util"] == 0
    assert 10 < avg["inference"]["gpu_util"] < 80


def test_slow_metrics_come_on_the_slow_cadence():
    source = SimSource.synthetic(1, 1, interval=1.0, slow_interval=5.0)
    has_energy = ["energy_mj" in m for m in metrics(source, 10)]
    assert has_energy == [True, False, False, False, False] * 2


def test_only_hopper_and_later_report_gpm_metrics(tmp_path):
    """NVML's GPM metrics need Hopper or newer: a simulated A100 reports utilization and
    energy but no SM occupancy, tensor-core activity or DRAM bandwidth, like a real one."""
    gpm = {"sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct"}
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps([{"host": "h1", "gpus": [
        {"uuid": "GPU-a100", "index": 0, "name": "A100-80GB"},
        {"uuid": "GPU-h100", "index": 1, "name": "H100-80GB"},
        {"uuid": "GPU-h200", "index": 2, "name": "NVIDIA H200"}]}]))  # fmt: skip
    source = SimSource.from_fleet(load_fleet(path), interval=1.0, slow_interval=1.0)
    seen = {}
    for _ in range(5):
        for record in source.tick(now=0.0)["h1"]:
            seen.setdefault(record["gpu"], set()).update(record["m"])
    assert "energy_mj" in seen["GPU-a100"] and "gpu_util" in seen["GPU-a100"]
    assert not gpm & seen["GPU-a100"]
    assert gpm <= seen["GPU-h100"] and gpm <= seen["GPU-h200"]


def test_a_mig_slice_reports_activity_only_from_hopper_on(tmp_path):
    """A MIG slice's activity is GPM's (NVML has no utilization on MIG devices): an
    A100's slices report their memory alone, an H100's their utilization and GPM too."""
    def mig(uuid, name):
        return {"uuid": uuid, "index": 0, "name": name, "mode": "mig", "slices": [
            {"uuid": f"MIG-{uuid}", "gpu_instance_id": 1, "profile": "1g.10gb", "memory_total": 10 * 2**30}]}
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps([{"host": "a", "gpus": [mig("GPU-a100", "A100-80GB")]},
                                {"host": "h", "gpus": [mig("GPU-h100", "H100-80GB")]}]))
    source = SimSource.from_fleet(load_fleet(path), interval=1.0, slow_interval=1.0)
    seen = {}
    for _ in range(5):
        for records in source.tick(now=0.0).values():
            for record in records:
                if record.get("slice"):
                    seen.setdefault(record["slice"], set()).update(record["m"])
    activity = {"gpu_util", "sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct"}
    assert "mem_used" in seen["MIG-GPU-a100"] and not activity & seen["MIG-GPU-a100"]
    assert activity <= seen["MIG-GPU-h100"]


def test_energy_only_grows():
    source = SimSource.synthetic(1, 4, slow_interval=1.0)
    series = [m["energy_mj"] for m in metrics(source, 30)]
    for gpu in range(4):
        own = series[gpu::4]
        assert own == sorted(own)


def test_a_thousand_gpus_cost_little():
    source = SimSource.synthetic(125, 8)
    source.tick()
    started = time.process_time()
    for _ in range(5):
        source.tick()
    assert (time.process_time() - started) / 5 < 0.25


def test_a_fleet_file_gives_hosts_tokens_and_gpus(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps([
        {"host": "h1", "token": "t1", "gpus": [
            {"uuid": "GPU-a", "index": 0, "name": "H100-80GB", "memory_total": 85899345920,
             "power_limit_mw": 700000}]},
        {"host": "h2", "token": "t2", "gpus": [{"uuid": "GPU-b", "index": 0}]},
    ]))  # fmt: skip
    hosts = SimSource.from_fleet(load_fleet(path)).hosts()
    assert [(h.host, h.token, h.gpus[0]["uuid"]) for h in hosts] == [
        ("h1", "t1", "GPU-a"),
        ("h2", "t2", "GPU-b"),
    ]


def test_a_bad_fleet_file_names_the_field(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps([{"host": "h1", "gpus": [{"uuid": "GPU-a", "index": -1}]}]))
    with pytest.raises(FleetError, match=r"host #0 gpus\[0\]\.index must be a non-negative"):
        load_fleet(path)


def test_a_fleet_file_names_a_bad_fault(tmp_path):
    import json

    import pytest

    from agent.backends.sim import FleetError, load_fleet

    path = tmp_path / "fleet.json"
    path.write_text(json.dumps([{"host": "h1", "gpus": [{"uuid": "GPU-a", "index": 0, "fault": "xid:abc"}]}]))
    with pytest.raises(FleetError, match=r"gpus\[0\]\.fault must be one of"):
        load_fleet(path)
    path.write_text(json.dumps([{"host": "h1", "gpus": [{"uuid": "GPU-a", "index": 0, "fault": "xid:79"}]}]))
    assert load_fleet(path)[0]["gpus"][0]["fault"] == "xid:79"


def _emit_times(
    spread: bool, hosts: int = 4, interval: float = 0.4, seconds: float = 1.0
) -> dict[str, list[float]]:
    source = SimSource.synthetic(hosts, 2, interval=interval, spread=spread)
    seen: dict[str, list[float]] = {}
    began = time.monotonic()
    source.start(lambda host, records: seen.setdefault(host, []).append(time.monotonic() - began))
    time.sleep(seconds)
    source.stop()
    return seen


def test_spread_hosts_sample_at_their_own_moments_of_the_interval():
    seen = _emit_times(spread=True)
    assert sorted(seen) == [f"sim-host-{i:03d}" for i in range(4)]
    firsts = [seen[f"sim-host-{i:03d}"][0] for i in range(4)]
    # host i of 4 first samples at i/4 of the 0.4 s interval, then once an interval
    for i, first in enumerate(firsts):
        assert first == pytest.approx(i * 0.1, abs=0.06), firsts
    for times in seen.values():
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert gaps and all(g == pytest.approx(0.4, abs=0.08) for g in gaps), times


def test_without_spread_every_host_samples_at_once():
    seen = _emit_times(spread=False)
    firsts = [times[0] for times in seen.values()]
    assert len(firsts) == 4 and max(firsts) - min(firsts) < 0.05, firsts
