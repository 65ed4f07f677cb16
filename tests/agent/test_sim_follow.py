"""With --follow-allocations the simulated fleet runs what the console says each device
is held for: free and pending devices idle with no processes, a running instance's
devices busy, MIG and vGPU slices with per-slice readings (absent, never 0, where the
mode cannot report)."""

from agent.backends.sim import SimSource, apply_allocations, workload_for
from agent.cli import http_base

GIB = 2**30


def fleet():
    slices = [{"uuid": f"MIG-m-{k}", "gpu_instance_id": k + 1, "profile": "1g.10gb", "memory_total": 10 * GIB}
              for k in range(7)]
    vgpus = [{"uuid": f"VGPU-v-{k}", "gpu_instance_id": k + 1, "profile": "H100-20C", "memory_total": 20 * GIB}
             for k in range(4)]
    source = SimSource.from_fleet([
        {"host": "pass", "token": "t1", "gpus": [{"uuid": f"GPU-p-{i}", "index": i} for i in range(3)]},
        {"host": "mig", "token": "t2", "gpus": [{"uuid": "GPU-m", "index": 0, "mode": "mig", "slices": slices}]},
        {"host": "vgpu", "token": "t3", "gpus": [{"uuid": "GPU-v", "index": 0, "mode": "vgpu", "slices": vgpus}]},
    ])
    source.follow("http://console.example")
    return source


def readings(source, ticks=6):
    """{device uuid: [record, …]} over ``ticks`` ticks (the first is a slow one)."""
    out = {}
    for _ in range(ticks):
        for records in source.tick(now=0.0).values():
            for r in records:
                out.setdefault(r.get("slice") or r["gpu"], []).append(r)
    return out


def test_free_and_pending_gpus_idle_and_a_running_one_works():
    source = fleet()
    apply_allocations(source.fleet[0], {"GPU-p-1": {"state": "pending", "instance": "acme-train"},
                                        "GPU-p-2": {"state": "running", "instance": "acme-train"}})
    seen = readings(source)
    for idle in ("GPU-p-0", "GPU-p-1"):
        assert all(r["m"]["gpu_util"] == 0 and "procs" not in r for r in seen[idle])
    assert all(r["m"]["gpu_util"] >= 90 and r["procs"][0]["pid"] > 0 for r in seen["GPU-p-2"])


def test_a_stop_makes_the_gpu_idle_at_the_next_tick():
    source = fleet()
    apply_allocations(source.fleet[0], {"GPU-p-0": {"state": "running", "instance": "acme-train"}})
    assert readings(source, 1)["GPU-p-0"][0]["m"]["gpu_util"] >= 90
    apply_allocations(source.fleet[0], {"GPU-p-0": {"state": "stopping", "instance": "acme-train"}})
    record = readings(source, 1)["GPU-p-0"][0]
    assert record["m"]["gpu_util"] == 0 and "procs" not in record


def test_mig_slices_report_their_own_readings():
    source = fleet()
    assert source.hosts()[1].gpus[0]["mig_mode"] is True
    assert len(source.hosts()[1].gpus[0]["slices"]) == 7
    apply_allocations(source.fleet[1], {"MIG-m-2": {"state": "running", "instance": "acme-notebook-train"}})
    seen = readings(source)
    busy, free = seen["MIG-m-2"], seen["MIG-m-0"]
    assert busy[0]["m"]["gpu_util"] >= 90 and busy[0]["m"]["mem_used"] > 0 and busy[0]["procs"]
    assert free[0]["m"]["gpu_util"] == 0 and free[0]["m"]["mem_used"] == 0
    assert all("power_mw" not in r["m"] and "temp_c" not in r["m"] for r in busy)  # per GPU only
    parent = seen["GPU-m"]
    assert all("gpu_util" not in r["m"] for r in parent)  # no whole-GPU utilization in MIG mode
    assert all(r["m"]["power_mw"] > 0 for r in parent)


def test_vgpus_report_utilization_and_memory_but_no_gpm():
    source = fleet()
    apply_allocations(source.fleet[2], {"VGPU-v-1": {"state": "running", "instance": "globex-serve"}})
    seen = readings(source)
    assert set(seen["VGPU-v-1"][0]["m"]) == {"gpu_util", "mem_util", "mem_used", "mem_total"}
    assert seen["VGPU-v-0"][0]["m"]["gpu_util"] == 0


def test_workloads_follow_the_instance_name():
    assert [workload_for(n) for n in ("acme-train-70b", "globex-render", "acme-batch-spot", "globex-serve")] == [
        "training", "copy", "held", "inference"]
    assert http_base("wss://console.example/ws/agent/") == "https://console.example"


def test_a_running_instances_process_has_a_name_user_command_and_container():
    source = fleet()
    apply_allocations(source.fleet[0], {"GPU-p-0": {"state": "running", "instance": "acme-train"}})
    proc = readings(source, 1)["GPU-p-0"][0]["procs"][0]
    assert proc["name"] == "python" and proc["user"] == "ubuntu" and proc["cmd"].startswith("python train.py")
    assert len(proc["cgroup"]) == 12
