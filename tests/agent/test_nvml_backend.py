import sys
import time

import pytest

from agent.backends import nvml as nvml_backend
from agent.backends.nvml import NvmlSource, NvmlUnavailable


def opened(**kw) -> NvmlSource:
    source = NvmlSource(host="gpu-host", **kw)
    source.open()
    return source


def by_gpu(records, uuid):
    return [r for r in records if r["gpu"] == uuid and "slice" not in r]


def test_it_reads_the_fast_fields(fake_nvml):
    fake = fake_nvml()
    [record] = by_gpu(opened().sample_fast(), fake.devices[0].uuid)
    assert record["m"] == {
        "gpu_util": 87, "mem_util": 31, "mem_used": 40 * 2**30, "mem_total": 150 * 2**30,
        "power_mw": 612_345, "power_limit_mw": 700_000, "temp_c": 61, "sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201, "clocks_event_reasons": 4, "ecc_corrected_volatile": 2,
        "ecc_uncorrected_volatile": 0, "fan_pct": 40,
    }  # fmt: skip
    assert record["procs"] == [{"pid": 4242, "used_memory": 30 * 2**30}]


def test_it_describes_each_gpu_in_the_hello(fake_nvml):
    fake_nvml()
    gpu = opened().hosts()[0].gpus[1]
    assert gpu == {
        "uuid": "GPU-00000001-0000-0000-0000-000000000000", "index": 1, "name": "NVIDIA H200",
        "memory_total": 150 * 2**30, "pci_bus_id": "00000000:19:00.0",
        "power_limit_mw": 700_000, "mig_mode": False, "slices": [], "virtualization": "none",
    }  # fmt: skip


def test_an_unsupported_field_is_absent_not_zero(fake_nvml):
    fake = fake_nvml()
    fake.devices[0].unsupported = {"fan", "ecc"}
    [record] = by_gpu(opened().sample_fast(), fake.devices[0].uuid)
    assert "fan_pct" not in record["m"]
    assert "ecc_corrected_volatile" not in record["m"]
    assert record["m"]["power_mw"] == 612_345


def test_it_stops_calling_what_a_gpu_does_not_support(fake_nvml):
    fake = fake_nvml()
    fake.devices[0].unsupported = {"fan"}
    source = opened()
    for _ in range(3):
        source.sample_fast()
    assert fake.calls(fake.devices[0], "fan") == 1
    assert fake.calls(fake.devices[1], "fan") == 3


def test_the_fast_path_makes_no_slow_call(fake_nvml):
    fake = fake_nvml()
    opened().sample_fast()
    for what in ("energy", "fields", "gpm_sample", "proc_util"):
        assert fake.calls(fake.devices[0], what) == 0


def test_a_lost_gpu_becomes_an_event_and_the_others_go_on(fake_nvml):
    fake = fake_nvml()
    source = opened()
    fake.devices[0].lost = True
    records = source.sample_fast()
    assert by_gpu(records, fake.devices[0].uuid)[0]["event"]["kind"] == "gpu_lost"
    assert "m" in by_gpu(records, fake.devices[1].uuid)[0]
    source.sample_slow()
    later = source.sample_fast() + source.sample_slow() + source.sample_counters()
    assert by_gpu(later, fake.devices[0].uuid) == []
    assert by_gpu(later, fake.devices[1].uuid)


def test_unknown_errors_on_every_call_mean_a_lost_gpu(fake_nvml):
    fake = fake_nvml()
    source = opened()
    fake.devices[1].unknown = True
    [record] = by_gpu(source.sample_fast(), fake.devices[1].uuid)
    assert record["event"]["kind"] == "gpu_lost"


def test_a_lost_gpu_that_answers_again_comes_back(fake_nvml, monkeypatch):
    monkeypatch.setattr(nvml_backend, "LOST_PROBE_S", 0.0)
    fake = fake_nvml()
    source = opened()
    fake.devices[0].lost = True
    source.sample_fast()
    fake.devices[0].lost = False
    [record] = by_gpu(source.sample_fast(), fake.devices[0].uuid)
    assert record["event"] == {"kind": "gpu_back"}
    assert "m" in by_gpu(source.sample_fast(), fake.devices[0].uuid)[0]


def test_the_counter_set_reads_energy_and_byte_counters(fake_nvml):
    fake = fake_nvml()
    [record] = by_gpu(opened().sample_counters(), fake.devices[0].uuid)
    assert record["m"]["energy_mj"] == 123_456_789
    assert record["m"]["pcie_tx_bytes"] == 1_000
    assert record["m"]["pcie_rx_bytes"] == 2_000
    assert record["m"]["nvlink_tx_bytes"] == 30 * 1024  # NVML counts these in KiB
    assert record["m"]["nvlink_rx_bytes"] == 40 * 1024


def test_nvlink_falls_back_to_the_byte_count_fields(fake_nvml):
    fake = fake_nvml()
    fake.devices[0].fields = {197: 1, 198: 2, 202: 7_000, 204: 8_000}
    source = opened()
    [first] = by_gpu(source.sample_counters(), fake.devices[0].uuid)
    [second] = by_gpu(source.sample_counters(), fake.devices[0].uuid)
    assert "nvlink_tx_bytes" not in first["m"]
    assert second["m"]["nvlink_tx_bytes"] == 7_000
    assert second["m"]["nvlink_rx_bytes"] == 8_000


def test_gpm_metrics_come_from_two_samples(fake_nvml):
    fake = fake_nvml()
    source = opened()
    assert by_gpu(source.sample_slow(), fake.devices[0].uuid) == []  # the first sample
    [second] = by_gpu(source.sample_slow(), fake.devices[0].uuid)
    assert set(second["m"]) == {"sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct"}
    assert second["m"]["sm_occupancy_pct"] == 41.5
    assert second["m"]["tensor_active_pct"] == 66.25
    assert second["m"]["dram_bw_util_pct"] == 38.0


def test_each_reading_carries_its_tensor_activity_at_the_defaults(fake_nvml):
    fake = fake_nvml()
    source = opened()  # slow set every 1 s: each tick
    source.sample_tick()  # the first GPM sample: nothing to compare with yet
    source._slow_due = time.monotonic()
    [record] = by_gpu(source.sample_tick(), fake.devices[0].uuid)
    assert record["m"]["gpu_util"] == 87 and record["m"]["tensor_active_pct"] == 66.25
    assert record["procs"] == [{"pid": 4242, "used_memory": 30 * 2**30}]


def test_the_gpm_default_follows_the_backend(tmp_path):
    from agent.cli import build_parser, check_numbers

    def slow(*argv):
        args = build_parser().parse_args(["--server", "ws://h/ws/agent/", *argv])
        check_numbers(args)
        return args.slow_interval

    assert slow() == 1.0
    assert slow("--interval", "2") == 2.0
    assert slow("--backend", "sim") == 5.0
    assert slow("--slow-interval", "10") == 10.0


def test_gpm_is_not_asked_of_a_gpu_without_it(fake_nvml):
    fake = fake_nvml()
    fake.devices[1].gpm_supported = False
    source = opened()
    source.sample_slow()
    assert by_gpu(source.sample_slow(), fake.devices[1].uuid) == []  # absent, never 0
    assert fake.calls(fake.devices[1], "gpm_sample") == 0


def test_process_sm_use_joins_the_process_list(fake_nvml):
    fake = fake_nvml()
    source = opened()
    source.sample_counters()
    [record] = by_gpu(source.sample_fast(), fake.devices[0].uuid)
    assert record["procs"] == [{"pid": 4242, "used_memory": 30 * 2**30, "sm_util": 55}]


def test_no_process_sm_data_means_no_sm_util(fake_nvml):
    fake = fake_nvml()
    fake.devices[0].proc_util = []  # NVML answers NotFound
    source = opened()
    source.sample_counters()
    [record] = by_gpu(source.sample_fast(), fake.devices[0].uuid)
    assert record["procs"] == [{"pid": 4242, "used_memory": 30 * 2**30}]


def test_mig_slices_are_children_of_their_gpu(fake_nvml, fake_device):
    gpu = fake_device(0)
    gpu.add_slice(1, "3g.71gb", 71 * 2**30)
    gpu.add_slice(2, "1g.18gb", 18 * 2**30)
    fake_nvml([gpu])
    hello = opened().hosts()[0].gpus[0]
    assert hello["mig_mode"] is True
    assert hello["slices"] == [
        {"uuid": gpu.mig_slices[0].uuid, "gpu_instance_id": 1, "profile": "3g.71gb",
         "memory_total": 71 * 2**30},
        {"uuid": gpu.mig_slices[1].uuid, "gpu_instance_id": 2, "profile": "1g.18gb",
         "memory_total": 18 * 2**30},
    ]  # fmt: skip


def test_mig_slices_report_memory_and_gpm_activity(fake_nvml, fake_device):
    gpu = fake_device(0)
    gpu.unsupported = {"util"}  # no NVML utilization in MIG mode
    mig = gpu.add_slice(2, "1g.18gb", 18 * 2**30)
    fake_nvml([gpu])
    source = opened()
    fast = source.sample_fast()
    source.sample_slow()
    slow = source.sample_slow()
    [memory] = [r for r in fast if r.get("slice") == mig.uuid]
    [activity] = [r for r in slow if r.get("slice") == mig.uuid]
    assert memory["gpu"] == gpu.uuid and memory["m"]["mem_used"] == mig.memory_total // 4
    assert activity["m"]["gpu_util"] == 25.0 and activity["m"]["tensor_active_pct"] == 10.0
    assert "gpu_util" not in by_gpu(fast, gpu.uuid)[0]["m"]


def test_xid_errors_arrive_as_events(fake_nvml):
    fake = fake_nvml()
    source = opened()
    received = []
    fake.events.append((fake.devices[1], 79, 0xFFFFFFFF))
    source.spawn(lambda: source.watch_xids(lambda host, recs: received.extend(recs)), "xid")
    deadline = time.monotonic() + 2
    while not received and time.monotonic() < deadline:
        time.sleep(0.01)
    source.stop()
    [record] = received
    assert record["gpu"] == fake.devices[1].uuid
    assert record["event"] == {"kind": "xid", "code": 79, "message": "GPU has fallen off the bus"}


def test_an_xid_on_a_mig_slice_names_the_slice(fake_nvml, fake_device):
    gpu = fake_device(0)
    mig = gpu.add_slice(5, "1g.18gb", 18 * 2**30)
    fake_nvml([gpu])
    source = opened()
    data = type("Event", (), {"device": gpu, "eventType": 0x8, "eventData": 13, "gpuInstanceId": 5})
    assert source.xid_record(data)["slice"] == mig.uuid


def test_it_explains_when_nvml_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailable, match="pynvml is not installed"):
        NvmlSource(host="h").open()


def test_it_explains_when_the_driver_is_missing(fake_nvml):
    fake = fake_nvml()

    def fail():
        raise fake.NVMLError_Unknown()

    fake.nvmlInit = fail
    with pytest.raises(NvmlUnavailable, match="NVML is not available"):
        NvmlSource(host="h").open()


def test_a_mig_reconfiguration_is_noticed(fake_nvml, fake_device):
    gpu = fake_device(0)
    gpu.add_slice(1, "3g.71gb", 71 * 2**30)
    fake_nvml([gpu])
    source = opened()
    seen = []
    source.on_inventory = lambda host, gpus: seen.append(gpus)
    assert source.rescan_mig() is False
    gpu.add_slice(2, "1g.18gb", 18 * 2**30)
    assert source.rescan_mig() is True
    [gpus] = seen
    assert [s["profile"] for s in gpus[0]["slices"]] == ["3g.71gb", "1g.18gb"]
    assert any(r.get("slice") == gpu.mig_slices[1].uuid for r in source.sample_fast())


def test_a_gpu_lost_before_the_start_is_left_out(fake_nvml):
    fake = fake_nvml()
    fake.devices[0].lost = True
    source = NvmlSource(host="h")
    fake.nvmlDeviceGetUUID = lambda dev: dev.uuid  # the UUID still answers, nothing else
    source.open()
    assert [g["uuid"] for g in source.hosts()[0].gpus] == [fake.devices[1].uuid]


def test_each_set_runs_on_its_own_cadence(fake_nvml, monkeypatch):
    fake = fake_nvml()
    steps = {}
    monkeypatch.setattr(
        nvml_backend, "run_every", lambda stop, every, step: steps.setdefault(every, step)
    )
    source = opened(interval=1.0, slow_interval=5.0, counter_interval=30.0)
    emitted = []
    source.start(lambda host, records: emitted.extend(records))
    source.stop()
    assert sorted(steps) == [1.0, 30.0]  # the slow set rides on the fast thread's ticks
    dev = fake.devices[0]
    reads = ("util", "energy", "fields", "gpm_sample", "proc_util")

    def calls_of(every):
        before = {what: fake.calls(dev, what) for what in reads}
        steps[every]()
        return {what for what in reads if fake.calls(dev, what) > before[what]}

    assert calls_of(1.0) == {"util", "gpm_sample"}  # the slow set is due at the start
    assert calls_of(1.0) == {"util"}  # and not again before slow_interval has passed
    source._slow_due = time.monotonic()
    assert calls_of(1.0) == {"util", "gpm_sample"}
    assert calls_of(30.0) == {"energy", "fields", "proc_util"}


def test_counters_are_read_only_every_counter_interval(fake_nvml):
    fake = fake_nvml()
    source = opened(interval=0.02, slow_interval=0.1, counter_interval=0.5)
    emitted = []
    started = time.monotonic()
    source.start(lambda host, records: emitted.extend(records))
    time.sleep(0.7)
    source.stop()
    elapsed = time.monotonic() - started
    dev = fake.devices[0]
    energy, gpm = fake.calls(dev, "energy"), fake.calls(dev, "gpm_sample")
    assert fake.calls(dev, "fields") == energy
    assert 1 <= energy <= elapsed / 0.5 + 1  # at start, then once per counter interval
    assert energy < gpm <= elapsed / 0.1 + 1  # GPM on the slow interval
    assert gpm < fake.calls(dev, "util")
    with_energy = [r for r in emitted if "energy_mj" in r.get("m", {})]
    with_gpm = [r for r in emitted if "tensor_active_pct" in r.get("m", {})]
    assert len(with_energy) == 2 * energy  # two GPUs
    assert with_gpm and not any("energy_mj" in r["m"] for r in with_gpm)


def test_gpm_buffers_are_allocated_once_and_reused(fake_nvml, monkeypatch):
    fake = fake_nvml()
    made = {"alloc": 0, "request": 0, "support": 0}
    alloc, request, support = (fake.nvmlGpmSampleAlloc, fake.c_nvmlGpmMetricsGet_t,
                               fake.nvmlGpmQueryDeviceSupport)  # fmt: skip

    def counting(key, fn):
        def call(*args):
            made[key] += 1
            return fn(*args)

        return call

    fake.nvmlGpmSampleAlloc = counting("alloc", alloc)
    fake.c_nvmlGpmMetricsGet_t = counting("request", request)
    fake.nvmlGpmQueryDeviceSupport = counting("support", support)
    source = opened()
    for _ in range(6):
        records = source.sample_slow()
    assert made == {"alloc": 4, "request": 2, "support": 2}  # per GPU: 2 samples, 1 request
    assert fake.calls(fake.devices[0], "gpm_sample") == 6
    [record] = by_gpu(records, fake.devices[0].uuid)
    assert record["m"]["tensor_active_pct"] == 66.25


def test_a_counter_that_is_not_supported_stays_absent(fake_nvml):
    fake = fake_nvml()
    fake.devices[0].unsupported = {"energy"}
    fake.devices[0].fields = {}  # every field answers NOT_SUPPORTED
    source = opened()
    for _ in range(3):
        assert by_gpu(source.sample_counters(), fake.devices[0].uuid) == []
    assert fake.calls(fake.devices[0], "energy") == 1
    assert "energy_mj" in by_gpu(source.sample_counters(), fake.devices[1].uuid)[0]["m"]


async def test_given_the_agents_loop_the_tick_runs_on_it_without_a_thread(fake_nvml):
    import asyncio
    import threading

    fake = fake_nvml()
    source = opened(interval=0.05, slow_interval=0.05, counter_interval=60.0)
    on_loop = []

    def emit(host, records):
        if threading.get_ident() == threading.main_thread().ident:
            on_loop.extend(r for r in records if "gpu_util" in r.get("m", {}))

    source.start(emit, asyncio.get_running_loop())
    await asyncio.sleep(0.32)
    source.stop_event.set()
    await asyncio.to_thread(source.stop)
    assert [t.name for t in source.threads] == ["nvml-xid"]  # the tick and the counters: on the loop
    ticks = len(on_loop) // len(fake.devices)
    assert 4 <= ticks <= 8
    assert any("tensor_active_pct" in r["m"] for r in on_loop)  # the slow set rode along
