"""What NVML reports on this GPU host for the agent's MIG, vGPU and GPM paths, read-only.

Run on a GPU host. It changes no GPU setting (never MIG, clocks or modes): it asks NVML
how each GPU is virtualized, whether MIG is on (and if so reads the slices as the agent
does), what the vGPU calls answer, and whether GPM's tensor-core activity reaches the
agent's readings: the agent's nvml backend ticks once a second while the GPU idles and
then while torch runs a bf16 matmul (when torch and a GPU are there).

    python3 bench/gpu_features.py --out features.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MATMUL = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + {seconds}
while time.time() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
"""


def answer(fn):
    """fn() as JSON-able text, or the error it raised (an NVML error, a missing call)."""
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 (the error is the answer)
        return f"error: {type(exc).__name__}: {exc}"
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list | tuple):
        return [v if isinstance(v, int | float | str) else repr(v) for v in value]
    return value if isinstance(value, int | float | str) or value is None else repr(value)


def ask(nv, name: str, *args):
    return answer(lambda: getattr(nv, name)(*args))


def _gpm_supported(nv, h) -> int:
    return nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice


def nvml_facts(nv) -> list[dict]:
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        facts = {
            "index": i,
            "name": ask(nv, "nvmlDeviceGetName", h),
            "virtualization_mode": ask(nv, "nvmlDeviceGetVirtualizationMode", h),
            "mig_mode (current, pending)": ask(nv, "nvmlDeviceGetMigMode", h),
            "gpm_supported": answer(partial(_gpm_supported, nv, h)),
            "active_vgpus": ask(nv, "nvmlDeviceGetActiveVgpus", h),
            "vgpu_utilization": ask(nv, "nvmlDeviceGetVgpuUtilization", h, 0),
            "host_vgpu_mode": ask(nv, "nvmlDeviceGetHostVgpuMode", h),
        }
        out.append(facts)
    return out


def agent_ticks(source, seconds: int, phase: str) -> list[dict]:
    rows = []
    for _ in range(seconds):
        started = time.monotonic()
        for record in source.sample_tick():
            m = record.get("m", {})
            rows.append({"phase": phase, "gpu": record["gpu"][-8:], "slice": record.get("slice"),
                         **{k: m.get(k) for k in ("gpu_util", "tensor_active_pct",
                                                  "sm_occupancy_pct", "dram_bw_util_pct",
                                                  "mem_used")}})  # fmt: skip
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=int, default=6, help="agent ticks per phase (default 6)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    import pynvml as nv

    from agent.backends.nvml import NvmlSource

    nv.nvmlInit()
    report = {"driver": answer(nv.nvmlSystemGetDriverVersion), "gpus": nvml_facts(nv)}
    report["pynvml"] = getattr(nv, "__version__", None) or answer(lambda: __import__("importlib.metadata").metadata.version("nvidia-ml-py"))
    source = NvmlSource(host="features")
    source.open()
    report["hello"] = source.hosts()[0].gpus
    source._slow_due = time.monotonic()
    source.sample_tick()  # the first GPM sample: the next ones are measured against it
    ticks = agent_ticks(source, args.seconds, "idle")
    load = subprocess.Popen([sys.executable, "-c", MATMUL.format(seconds=args.seconds + 6)])
    time.sleep(4)  # CUDA start-up, the first kernels
    ticks += agent_ticks(source, args.seconds, "bf16 matmul 8192³")
    load.wait()
    source.stop()
    report["ticks"] = ticks
    busy = [t["tensor_active_pct"] for t in ticks if t["phase"] != "idle"]
    report["tensor_in_every_busy_reading"] = bool(busy) and all(v is not None for v in busy)
    for gpu in report["gpus"]:
        print(json.dumps(gpu))
    print(json.dumps(report["hello"]))
    print("| phase | gpu | slice | gpu_util | tensor % | SM occupancy % | DRAM bw % |")
    print("|---|---|---|---:|---:|---:|---:|")
    for t in ticks:
        print(f"| {t['phase']} | …{t['gpu']} | {t['slice'] or ''} | {t['gpu_util']} | "
              f"{t['tensor_active_pct']} | {t['sm_occupancy_pct']} | {t['dram_bw_util_pct']} |")  # fmt: skip
    print(f"tensor activity in every busy reading: {report['tensor_in_every_busy_reading']}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
