"""Calibrate the achieved-TFLOP/s estimate on one real GPU.

Each workload counts its own floating-point operations (a matrix product of n×n by
n×n is 2·n³) and runs for ``--seconds``; NVML's GPM metrics (tensor-core activity,
SM occupancy, DRAM bandwidth) are read over the middle half of the run, so warm-up
and the tail are left out. Prints one JSON line per workload and a summary table:

    achieved TFLOP/s, tensor activity %, activity × dense peak of the precision,
    and the ratio achieved / (activity × peak), which is the model's calibration factor.

    python3 bench/tflops_calibration.py --seconds 8 --out calibration.json

Needs torch with CUDA and nvidia-ml-py (pynvml) with GPM (Hopper or later).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

# Dense (no sparsity) peaks of the H100/H200 SXM, TFLOP/s, by the vendor's datasheet.
DENSE_PEAK_H200 = {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp8": 1978.9}

WORKLOADS = [
    # (name, precision, n) ; n = None for the copy
    ("bf16 8192", "bf16", 8192),
    ("bf16 4096", "bf16", 4096),
    ("bf16 2048", "bf16", 2048),
    ("bf16 1024", "bf16", 1024),
    ("fp16 8192", "fp16", 8192),
    ("tf32 8192", "tf32", 8192),
    ("fp8 8192", "fp8", 8192),
    ("fp8 4096", "fp8", 4096),
    ("copy 4 GiB", "copy", None),
]

GPM = {"tensor": 5, "sm_occupancy": 3, "dram_bw": 10, "graphics": 1}


class Gpm:
    """Two GPM samples of GPU 0 and the metrics between them."""

    def __init__(self):
        import pynvml as nv

        self.nv = nv
        nv.nvmlInit()
        self.handle = nv.nvmlDeviceGetHandleByIndex(0)
        self.name = nv.nvmlDeviceGetName(self.handle)
        if isinstance(self.name, bytes):
            self.name = self.name.decode()
        support = nv.nvmlGpmQueryDeviceSupport(self.handle)
        if not support.isSupportedDevice:
            raise SystemExit("tflops_calibration: error: this GPU has no GPM metrics")
        self.samples = (nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc())

    def start(self):
        self.nv.nvmlGpmSampleGet(self.handle, self.samples[0])
        self.t0 = time.time()

    def stop(self) -> dict:
        nv = self.nv
        nv.nvmlGpmSampleGet(self.handle, self.samples[1])
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM)
        request.sample1, request.sample2 = self.samples
        for i, number in enumerate(GPM.values()):
            request.metrics[i].metricId = number
        nv.nvmlGpmMetricsGet(request)
        out = {"window_s": round(time.time() - self.t0, 3)}
        for i, name in enumerate(GPM):
            metric = request.metrics[i]
            out[name + "_pct"] = round(float(metric.value), 2) if metric.nvmlReturn == 0 else None
        out["sm_clock_mhz"] = nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM)
        out["power_w"] = round(nv.nvmlDeviceGetPowerUsage(self.handle) / 1000, 1)
        return out


def make_step(torch, precision: str, n: int | None):
    """A function doing one unit of work, and the FLOPs (or bytes) it does."""
    if precision == "copy":
        src = torch.empty(4 * 1024**3, device="cuda", dtype=torch.uint8)
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 2 * src.numel()  # bytes read + written
    if precision == "fp8":
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return None, 0
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major second operand
        one = torch.tensor(1.0, device="cuda")

        def step():
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return step, 2 * n**3
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[precision]
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    out = torch.empty(n, n, device="cuda", dtype=dtype)
    return (lambda: torch.matmul(a, b, out=out)), 2 * n**3


def run_one(torch, gpm: Gpm, name: str, precision: str, n: int | None, seconds: float) -> dict:
    step, work = make_step(torch, precision, n)
    if step is None:
        return {"workload": name, "precision": precision, "skipped": "torch has no fp8 matmul here"}
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    # Launch in batches so the CPU never starves the GPU; count completed steps.
    batch = max(10, int(2e11 // max(work, 1))) if precision != "copy" else 20
    done = [0]
    readings = {}

    def sampler(begin: float):
        time.sleep(max(0.0, begin + seconds * 0.25 - time.time()))
        gpm.start()
        time.sleep(seconds * 0.5)
        readings.update(gpm.stop())

    begin = time.time()
    thread = threading.Thread(target=sampler, args=(begin,))
    thread.start()
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start_event.record()
    while time.time() - begin < seconds:
        for _ in range(batch):
            step()
        done[0] += batch
        torch.cuda.synchronize()
    end_event.record()
    torch.cuda.synchronize()
    thread.join()
    elapsed = start_event.elapsed_time(end_event) / 1000
    rate = work * done[0] / elapsed
    row = {"workload": name, "precision": precision, "n": n, "steps": done[0], "elapsed_s": round(elapsed, 3)}
    if precision == "copy":
        row["gb_per_s"] = round(rate / 1e9, 1)
    else:
        row["tflops"] = round(rate / 1e12, 1)
        peak = DENSE_PEAK_H200[precision]
        activity = (readings.get("tensor_pct") or 0) / 100
        row["activity_x_peak"] = round(activity * peak, 1)
        row["factor"] = round(row["tflops"] / row["activity_x_peak"], 3) if activity else None
        row["mfu_pct"] = round(100 * row["tflops"] / peak, 1)
    row.update(readings)
    del step
    torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per workload (default 8)")
    parser.add_argument("--only", help="comma-separated workload names to run")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("tflops_calibration: error: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("tflops_calibration: error: no CUDA GPU visible", file=sys.stderr)
        return 2
    gpm = Gpm()
    chosen = WORKLOADS
    if args.only:
        wanted = {w.strip() for w in args.only.split(",")}
        chosen = [w for w in WORKLOADS if w[0] in wanted]
    rows = []
    print(json.dumps({"gpu": gpm.name, "torch": torch.__version__}), flush=True)
    for name, precision, n in chosen:
        try:
            row = run_one(torch, gpm, name, precision, n, args.seconds)
        except Exception as exc:  # one workload failing (fp8 kernels) must not lose the rest
            row = {"workload": name, "precision": precision, "error": f"{type(exc).__name__}: {exc}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"gpu": gpm.name, "torch": torch.__version__, "rows": rows}, fh, indent=1)
    print(f"\n{'workload':<12} {'TFLOP/s':>8} {'tensor%':>8} {'act×peak':>9} {'factor':>7} {'MFU%':>6}")
    for r in rows:
        if "tflops" in r:
            print(f"{r['workload']:<12} {r['tflops']:>8} {r.get('tensor_pct')!s:>8} "
                  f"{r['activity_x_peak']:>9} {r['factor']!s:>7} {r['mfu_pct']:>6}")
        elif "gb_per_s" in r:
            print(f"{r['workload']:<12} {r['gb_per_s']} GB/s tensor {r.get('tensor_pct')}% dram {r.get('dram_bw_pct')}%")
        else:
            print(f"{r['workload']:<12} {r.get('skipped') or r.get('error')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
