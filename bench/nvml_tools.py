"""The agent's NVML cost beside other ways of reading the same GPU fields.

Run on a GPU host. Each tool reads the fast fields (utilization, memory, power,
temperature, SM and memory clocks, clock-event reasons, volatile ECC counts, compute
processes) of every GPU, over and over for --seconds, in a subprocess of its own so
that its peak RSS is its own:

1. agent     - the agent's nvml backend: fast set each period, slow set (energy,
               PCIe/NVLink field values, GPM, per-process SM use) every 5th period,
               records encoded by the agent's outbox;
2. agent-fast - the same, fast set only;
   agent-slow - the slow set alone, once per step (what one slow tick costs per GPU);
3. bare      - a plain pynvml loop over the same fast fields;
4. nvitop    - nvitop's Device API for the same fields;
5. gpustat   - gpustat.new_query() (all GPUs, with process details);
6. nvidia-smi - one `nvidia-smi --query-gpu=... --format=csv` per period.

    python bench/nvml_tools.py --out results.json

Prints a markdown table with ratios against the bare loop. A tool that is not
installed is skipped with a note.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SLOW_EVERY = 5
SMI_FIELDS = [
    "utilization.gpu", "utilization.memory", "memory.used", "memory.total", "power.draw",
    "power.limit", "temperature.gpu", "clocks.sm", "clocks.mem", "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
]  # fmt: skip
SMI_REASONS = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]


class Skip(Exception):
    """The tool is not installed here."""


def rss_mib(who=resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def cpu_s(who=resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


# -- the tools: each returns (a step that reads every GPU once, the number of GPUs) ----


def tool_agent(fast: bool, slow: bool):
    from monitoring.agent.backends.nvml import NvmlSource
    from monitoring.agent.outbox import Outbox

    source = NvmlSource(host="bench")
    source.open()
    outbox = Outbox("0" * 32)
    count = [0]

    def step() -> None:
        if fast:
            outbox.put(source.sample_fast())
        if slow and (not fast or count[0] % SLOW_EVERY == 0):
            outbox.put(source.sample_slow())
        count[0] += 1
        outbox.take()

    return step, len(source.gpus)


def tool_bare():
    import pynvml as nv

    nv.nvmlInit()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    calls = [
        (nv.nvmlDeviceGetUtilizationRates, ()),
        (nv.nvmlDeviceGetMemoryInfo, ()),
        (nv.nvmlDeviceGetPowerUsage, ()),
        (nv.nvmlDeviceGetTemperature, (nv.NVML_TEMPERATURE_GPU,)),
        (nv.nvmlDeviceGetClockInfo, (nv.NVML_CLOCK_SM,)),
        (nv.nvmlDeviceGetClockInfo, (nv.NVML_CLOCK_MEM,)),
        (reasons, ()),
        (nv.nvmlDeviceGetTotalEccErrors, (0, nv.NVML_VOLATILE_ECC)),
        (nv.nvmlDeviceGetTotalEccErrors, (1, nv.NVML_VOLATILE_ECC)),
        (nv.nvmlDeviceGetComputeRunningProcesses, ()),
    ]

    def step() -> None:
        for h in handles:
            for fn, extra in calls:
                try:
                    fn(h, *extra)
                except nv.NVMLError:
                    pass

    return step, len(handles)


def tool_nvitop():
    try:
        from nvitop import Device
    except ImportError:
        raise Skip("nvitop is not installed (pip install nvitop)") from None
    devices = Device.all()

    def step() -> None:
        for d in devices:
            d.gpu_utilization()
            d.memory_utilization()
            d.memory_used()
            d.memory_total()
            d.power_usage()
            d.power_limit()
            d.temperature()
            d.sm_clock()
            d.memory_clock()
            d.total_volatile_uncorrected_ecc_errors()
            d.processes()

    return step, len(devices)


def tool_gpustat():
    try:
        import gpustat
    except ImportError:
        raise Skip("gpustat is not installed (pip install gpustat)") from None
    count = len(gpustat.new_query().gpus)

    def step() -> None:
        gpustat.new_query()

    return step, count


def tool_smi():
    if shutil.which("nvidia-smi") is None:
        raise Skip("nvidia-smi is not on the PATH")
    fields = None
    for reason in SMI_REASONS:
        query = ",".join([*SMI_FIELDS, reason])
        done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode == 0:
            fields = query
            count = len(done.stdout.strip().splitlines())
            break
    if fields is None:
        raise Skip("nvidia-smi refused the query")
    cmd = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]

    def step() -> None:
        subprocess.run(cmd, capture_output=True, check=True)

    return step, count


TOOLS = {
    "agent": lambda: tool_agent(True, True),
    "agent-fast": lambda: tool_agent(True, False),
    "agent-slow": lambda: tool_agent(False, True),
    "bare": tool_bare,
    "nvitop": tool_nvitop,
    "gpustat": tool_gpustat,
    "nvidia-smi": tool_smi,
}


def child(name: str, seconds: float, max_steps: int) -> dict:
    try:
        step, gpus = TOOLS[name]()
    except Skip as exc:
        return {"tool": name, "skipped": str(exc)}
    step()  # warm up
    steps = 0
    cpu0, kids0, wall0 = cpu_s(), cpu_s(resource.RUSAGE_CHILDREN), time.perf_counter()
    while time.perf_counter() - wall0 < seconds and steps < max_steps:
        step()
        steps += 1
    wall = time.perf_counter() - wall0
    cpu = cpu_s() - cpu0 + cpu_s(resource.RUSAGE_CHILDREN) - kids0
    samples = steps * gpus
    rss = rss_mib()
    if name == "nvidia-smi":
        rss = max(rss, rss_mib(resource.RUSAGE_CHILDREN))
    return {"tool": name, "gpus": gpus, "samples": samples, "cpu_us": cpu / samples * 1e6,
            "wall_us": wall / samples * 1e6, "rss_mib": rss}  # fmt: skip


def measure(name: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--seconds", str(args.seconds),
           "--max-steps", str(args.max_steps)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return {"tool": name, "skipped": f"failed: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    bare = next((r for r in results if r["tool"] == "bare" and "skipped" not in r), None)
    rows = [
        "| tool | GPUs | GPU-samples | CPU µs / GPU-sample | wall µs / GPU-sample | "
        "peak RSS MiB | CPU × bare | wall × bare |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "skipped" in r:
            rows.append(f"| {r['tool']} | | | | | | | skipped: {r['skipped']} |")
            continue
        cpu_x = f"{r['cpu_us'] / bare['cpu_us']:.1f}" if bare else "—"
        wall_x = f"{r['wall_us'] / bare['wall_us']:.1f}" if bare else "—"
        rows.append(f"| {r['tool']} | {r['gpus']} | {r['samples']:,} | {r['cpu_us']:.1f} | "
                    f"{r['wall_us']:.1f} | {r['rss_mib']:.1f} | {cpu_x} | {wall_x} |")  # fmt: skip
    return "\n".join(rows)


def nvml_present() -> str | None:
    """None when NVML answers, else why not."""
    try:
        import pynvml
    except ImportError:
        return "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        return f"NVML is not available: {exc}"
    return None if count else "NVML sees no GPU"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="time per tool (default 3)")
    p.add_argument("--max-steps", type=int, default=1_000_000, help=argparse.SUPPRESS)
    p.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--child", choices=sorted(TOOLS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.seconds, args.max_steps)))
        return 0
    why = nvml_present()
    if why is not None:
        print(f"nvml_tools: {why}; run this on a host with an NVIDIA GPU and driver",
              file=sys.stderr)  # fmt: skip
        return 1
    results = [measure(name, args) for name in args.tools.split(",")]
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
