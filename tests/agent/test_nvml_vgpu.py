"""vGPU through NVML: the hello says how each GPU is virtualized; on a host in vGPU mode
each running vGPU is reported as a slice with its own memory and utilization."""

from agent.backends.nvml import NvmlSource


def opened() -> NvmlSource:
    source = NvmlSource(host="gpu-host")
    source.open()
    return source


def vgpu_host(fake_nvml, fake_device):
    gpu = fake_device(0)
    gpu.gpm_supported = False
    gpu.add_vgpu(7001, "bd0e2c4c-1111-2222-3333-444455556666", "NVIDIA H200-70C", 70 * 2**30, 12 * 2**30)
    gpu.add_vgpu(7002, "0a0b0c0d-1111-2222-3333-444455556666", "NVIDIA H200-70C", 70 * 2**30, 3 * 2**30)
    fake = fake_nvml([gpu])
    return fake, gpu


def test_the_hello_says_how_a_gpu_is_virtualized(fake_nvml, fake_device):
    plain, guest = fake_device(0), fake_device(1)
    guest.virtualization = 2
    fake_nvml([plain, guest])
    gpus = opened().hosts()[0].gpus
    assert [g["virtualization"] for g in gpus] == ["none", "vgpu"]
    assert gpus[1]["slices"] == []  # a guest's vGPU is its GPU


def test_a_vgpu_host_reports_its_vgpus_as_slices(fake_nvml, fake_device):
    vgpu_host(fake_nvml, fake_device)
    [gpu] = opened().hosts()[0].gpus
    assert gpu["virtualization"] == "host_vgpu"
    assert gpu["slices"] == [
        {"uuid": "VGPU-bd0e2c4c-1111-2222-3333-444455556666", "gpu_instance_id": 0,
         "profile": "H200-70C", "memory_total": 70 * 2**30},
        {"uuid": "VGPU-0a0b0c0d-1111-2222-3333-444455556666", "gpu_instance_id": 1,
         "profile": "H200-70C", "memory_total": 70 * 2**30},
    ]  # fmt: skip


def test_each_vgpu_reads_its_memory_and_utilization_and_absent_stays_absent(fake_nvml, fake_device):
    fake, gpu = vgpu_host(fake_nvml, fake_device)
    gpu.vgpu_util = {7001: (5_000, 64, 22)}  # the second vGPU has no utilization sample
    source = opened()
    records = source.sample_fast()
    slices = {r["slice"]: r["m"] for r in records if "slice" in r}
    assert slices["VGPU-bd0e2c4c-1111-2222-3333-444455556666"] == {
        "mem_total": 70 * 2**30, "mem_used": 12 * 2**30, "gpu_util": 64, "mem_util": 22}  # fmt: skip
    assert slices["VGPU-0a0b0c0d-1111-2222-3333-444455556666"] == {
        "mem_total": 70 * 2**30, "mem_used": 3 * 2**30}  # fmt: skip
    # A sample already seen is not reported again as a new reading.
    again = {r["slice"]: r["m"] for r in source.sample_fast() if "slice" in r}
    assert "gpu_util" not in again["VGPU-bd0e2c4c-1111-2222-3333-444455556666"]
    assert fake.calls(gpu, "vgpu_util") == 2  # one call per GPU per tick, for all its vGPUs


def test_a_vgpu_that_starts_later_is_picked_up_by_the_rescan(fake_nvml, fake_device):
    fake, gpu = vgpu_host(fake_nvml, fake_device)
    source = opened()
    told = []
    source.on_inventory = lambda host, gpus: told.append(gpus)
    gpu.add_vgpu(7003, "99999999-1111-2222-3333-444455556666", "NVIDIA H200-35C", 35 * 2**30, 0)
    assert source.rescan_mig() is True
    assert [s["profile"] for s in told[0][0]["slices"]] == ["H200-70C", "H200-70C", "H200-35C"]


def test_no_more_vgpus_than_a_hello_carries(fake_nvml, fake_device):
    gpu = fake_device(0)
    for i in range(10):
        gpu.add_vgpu(8000 + i, f"{i:08d}-1111-2222-3333-444455556666", "NVIDIA H200-14C", 14 * 2**30, 0)
    fake_nvml([gpu])
    [entry] = opened().hosts()[0].gpus
    assert len(entry["slices"]) == 8
