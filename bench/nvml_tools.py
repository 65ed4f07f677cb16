"""The agent's NVML cost beside other ways of reading the same GPU fields.

Run on a GPU host. Each tool reads the fast fields (utilization, memory, power,
temperature, SM and memory clocks, clock-event reasons, volatile ECC counts, compute
processes) of every GPU, over and over for --seconds, in a subprocess of its own so
that its peak RSS is its own:

1. agent      - the agent's nvml backend, records encoded by its outbox. Its three
                ticks are timed apart: fast (the fast set), slow (GPM and per-process
                SM use) and counters (total energy, PCIe/NVLink byte counters). The
                cost per GPU-sample at a cadence is then
                    fast + slow × interval / slow-interval + counters × interval / counter-interval,
                reported for the defaults (1 s / 1 s / 60 s) and for 0.2 s / 1 s / 60 s
                (ticks timed apart: bench/agent_process.py measures the whole process);
2. bare       - a plain pynvml loop over the same fast fields;
3. nvitop     - nvitop's Device API for the same fields;
4. gpustat    - gpustat.new_query() (all GPUs, with process details);
5. nvidia-smi - one `nvidia-smi --query-gpu=... --format=csv` per period;
6. calls      - what each slow and counter NVML call costs alone on GPU 0 (energy by
                its own call and as a field value, the counter field values, the GPM
                sample and metrics calls, per-process utilization).

    python bench/nvml_tools.py --out results.json

Prints markdown tables with ratios against the bare loop, and the goals met or not.
A tool that cannot be imported is skipped with the exception that stopped it.
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

# (label, fast interval, slow interval, counter interval) in seconds
CADENCES = [
    ("agent @ 1 s / 1 s / 60 s (defaults)", 1.0, 1.0, 60.0),
    ("agent @ 0.2 s / 1 s / 60 s", 0.2, 1.0, 60.0),
]
AGENT_SHARE = {"fast": 0.5, "slow": 0.25, "counters": 0.25}  # of --seconds
MIN_TICKS = 5
SMI_FIELDS = [
    "utilization.gpu", "utilization.memory", "memory.used", "memory.total", "power.draw",
    "power.limit", "temperature.gpu", "clocks.sm", "clocks.mem", "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
]  # fmt: skip
SMI_REASONS = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]
GOAL_BARE_X, GOAL_SMI_X, GOAL_RSS_MIB = 2.0, 100.0, 60.0


class Skip(Exception):
    """The tool cannot run here."""


def rss_mib(who=resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def cpu_s(who=resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def cannot_import(what: str, exc: BaseException) -> Skip:
    return Skip(f"cannot import {what}: {type(exc).__name__}: {exc}")


def timed(step, seconds: float, max_steps: int, gpus: int, min_steps: int = 1) -> dict:
    """Run step for about `seconds`; CPU (children included) and wall µs per GPU-tick."""
    steps = 0
    cpu0, kids0, wall0 = cpu_s(), cpu_s(resource.RUSAGE_CHILDREN), time.perf_counter()
    while steps < min_steps or (time.perf_counter() - wall0 < seconds and steps < max_steps):
        step()
        steps += 1
    wall = time.perf_counter() - wall0
    cpu = cpu_s() - cpu0 + cpu_s(resource.RUSAGE_CHILDREN) - kids0
    samples = steps * gpus
    return {"samples": samples, "cpu_us": cpu / samples * 1e6, "wall_us": wall / samples * 1e6}


# -- the agent: its fast, slow and counter ticks, timed apart ---------------------------


def child_agent(seconds: float, max_steps: int) -> dict:
    from agent.backends.nvml import NvmlSource
    from agent.outbox import Outbox

    source = NvmlSource(host="bench")
    source.open()
    outbox = Outbox("0" * 32)
    samplers = {"fast": source.sample_fast, "slow": source.sample_slow,
                "counters": source.sample_counters}  # fmt: skip
    steps = {}
    for name, sample in samplers.items():

        def step(sample=sample) -> None:
            outbox.put(sample())
            outbox.take()

        step()  # warm up (and the first GPM sample, which the next ones are measured against)
        steps[name] = step
    gpus = len(source.gpus)
    ticks = {name: timed(step, seconds * AGENT_SHARE[name], max_steps, gpus, MIN_TICKS)
             for name, step in steps.items()}  # fmt: skip
    source.stop()
    return {"tool": "agent", "gpus": gpus, "ticks": ticks, "rss_mib": rss_mib()}


def agent_rows(result: dict) -> list[dict]:
    """The agent's table rows: each cadence's blend, then its three ticks alone."""
    ticks, rows = result["ticks"], []
    for label, fast, slow, counters in CADENCES:
        blend = {"tool": label, "gpus": result["gpus"], "samples": None,
                 "rss_mib": result["rss_mib"], "cadence_s": [fast, slow, counters]}  # fmt: skip
        for key in ("cpu_us", "wall_us"):
            blend[key] = (ticks["fast"][key] + ticks["slow"][key] * fast / slow
                          + ticks["counters"][key] * fast / counters)  # fmt: skip
        rows.append(blend)
    names = {"fast": "agent fast tick (fast set)", "slow": "agent slow tick (GPM)",
             "counters": "agent counter tick (energy, PCIe/NVLink, process SM)"}  # fmt: skip
    for name, label in names.items():
        rows.append({"tool": label, "gpus": result["gpus"], **ticks[name],
                     "rss_mib": result["rss_mib"]})  # fmt: skip
    return rows


# -- the other tools: each returns (a step that reads every GPU once, the number of GPUs) --


def bare_step(nv):
    """(a step that makes the agent's fast NVML calls on every GPU once, the number of
    GPUs) over the pynvml module ``nv``: the floor any NVML reader pays."""
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


def tool_bare():
    import pynvml

    return bare_step(pynvml)


def tool_nvitop():
    try:
        from nvitop import Device
    except Exception as exc:  # noqa: BLE001 (whatever stops the import is the note)
        raise cannot_import("nvitop", exc) from None
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
    except Exception as exc:  # noqa: BLE001 (whatever stops the import is the note)
        raise cannot_import("gpustat", exc) from None
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


STEP_TOOLS = {"bare": tool_bare, "nvitop": tool_nvitop, "gpustat": tool_gpustat,
              "nvidia-smi": tool_smi}  # fmt: skip
TOOLS = ["agent", *STEP_TOOLS, "calls"]


def child_step_tool(name: str, seconds: float, max_steps: int) -> dict:
    step, gpus = STEP_TOOLS[name]()
    step()  # warm up
    result = {"tool": name, "gpus": gpus, **timed(step, seconds, max_steps, gpus)}
    rss = rss_mib()
    if name == "nvidia-smi":
        rss = max(rss, rss_mib(resource.RUSAGE_CHILDREN))
    result["rss_mib"] = rss
    return result


# -- the slow and counter calls one by one, on GPU 0 -----------------------------------


def child_calls(seconds: float, max_steps: int) -> dict:
    import pynvml as nv

    from agent.backends.nvml import FIELD_METRICS, GPM_METRICS

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    counters = [(getattr(nv, c[0][0], c[0][1]), c[0][2]) for c in FIELD_METRICS.values()]
    energy_field = (getattr(nv, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 83), 0)
    calls = {
        "nvmlDeviceGetTotalEnergyConsumption": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
        "nvmlDeviceGetFieldValues (energy field)": lambda: nv.nvmlDeviceGetFieldValues(
            h, [energy_field]
        ),
        "nvmlDeviceGetFieldValues (PCIe + NVLink counters)": lambda: nv.nvmlDeviceGetFieldValues(
            h, counters
        ),
        "nvmlDeviceGetFieldValues (counters + energy)": lambda: nv.nvmlDeviceGetFieldValues(
            h, [*counters, energy_field]
        ),
        "nvmlDeviceGetProcessUtilization": lambda: _answered(
            nv, nv.nvmlDeviceGetProcessUtilization, h, 0
        ),
        "nvmlDeviceGetComputeRunningProcesses (fast set)": lambda: (
            nv.nvmlDeviceGetComputeRunningProcesses(h)
        ),
    }
    gpm = _gpm_calls(nv, h, GPM_METRICS)
    calls.update(gpm)
    rows = []
    each = seconds / len(calls)
    for name, call in calls.items():
        try:
            call()
        except nv.NVMLError as exc:
            rows.append({"call": name, "skipped": f"{type(exc).__name__}: {exc}"})
            continue
        rows.append({"call": name, **timed(call, each, max_steps, 1, MIN_TICKS)})
    return {"tool": "calls", "calls": rows}


def _answered(nv, fn, *args):
    """fn(*args); NotFound (no process ran lately) is an answer too, as the agent sees it."""
    try:
        return fn(*args)
    except nv.NVMLError_NotFound:
        return None


def _gpm_calls(nv, h, metrics: dict) -> dict:
    """GPM's calls as the agent makes them, and a request built afresh for comparison."""
    if not hasattr(nv, "nvmlGpmQueryDeviceSupport"):
        return {}
    try:
        if not nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
            return {}
        samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
    except nv.NVMLError:
        return {}
    ids = [getattr(nv, const, number) for const, number in metrics.values()]

    def request():
        r = nv.c_nvmlGpmMetricsGet_t()
        r.version = nv.NVML_GPM_METRICS_GET_VERSION
        r.numMetrics = len(ids)
        for i, metric in enumerate(ids):
            r.metrics[i].metricId = metric
        r.sample1, r.sample2 = samples
        return r

    nv.nvmlGpmSampleGet(h, samples[0])
    time.sleep(0.1)
    nv.nvmlGpmSampleGet(h, samples[1])
    reused = request()
    return {
        "nvmlGpmQueryDeviceSupport (once, at start)": lambda: nv.nvmlGpmQueryDeviceSupport(h),
        "nvmlGpmSampleGet": lambda: nv.nvmlGpmSampleGet(h, samples[1]),
        f"nvmlGpmMetricsGet ({len(ids)} metrics, request reused)": lambda: nv.nvmlGpmMetricsGet(
            reused
        ),
        f"nvmlGpmMetricsGet ({len(ids)} metrics, request built each time)": lambda: (
            nv.nvmlGpmMetricsGet(request())
        ),
    }


def child(name: str, seconds: float, max_steps: int) -> dict:
    try:
        if name == "agent":
            return child_agent(seconds, max_steps)
        if name == "calls":
            return child_calls(seconds, max_steps)
        return child_step_tool(name, seconds, max_steps)
    except Skip as exc:
        return {"tool": name, "skipped": str(exc)}


def measure(name: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--seconds", str(args.seconds),
           "--max-steps", str(args.max_steps)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return {"tool": name, "skipped": f"failed: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- report -----------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    bare = next((r for r in rows if r["tool"] == "bare" and "skipped" not in r), None)
    out = [
        "| tool | GPUs | GPU-samples | CPU µs / GPU-sample | wall µs / GPU-sample | "
        "peak RSS MiB | CPU × bare | wall × bare |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "skipped" in r:
            out.append(f"| {r['tool']} | | | | | | | skipped: {r['skipped']} |")
            continue
        cpu_x = f"{r['cpu_us'] / bare['cpu_us']:.1f}" if bare else "—"
        wall_x = f"{r['wall_us'] / bare['wall_us']:.1f}" if bare else "—"
        samples = f"{r['samples']:,}" if r.get("samples") else "from the ticks"
        out.append(f"| {r['tool']} | {r['gpus']} | {samples} | {r['cpu_us']:.1f} | "
                   f"{r['wall_us']:.1f} | {r['rss_mib']:.1f} | {cpu_x} | {wall_x} |")  # fmt: skip
    return "\n".join(out)


def calls_table(result: dict) -> str:
    out = ["| NVML call (GPU 0) | calls | CPU µs / call | wall µs / call |", "|---|---:|---:|---:|"]
    for r in result["calls"]:
        if "skipped" in r:
            out.append(f"| {r['call']} | | | failed: {r['skipped']} |")
        else:
            out.append(f"| {r['call']} | {r['samples']:,} | {r['cpu_us']:.1f} | "
                       f"{r['wall_us']:.1f} |")  # fmt: skip
    return "\n".join(out)


def goals(rows: list[dict]) -> list[str]:
    ok = {r["tool"]: r for r in rows if "skipped" not in r}
    agent = ok.get(CADENCES[0][0])
    if agent is None:
        return []
    cpu, lines = agent["cpu_us"], []

    def line(text: str, met: bool) -> None:
        lines.append(f"- [{'x' if met else ' '}] {text}")

    if "bare" in ok:
        x = cpu / ok["bare"]["cpu_us"]
        line(f"agent at its defaults within {GOAL_BARE_X:g}× the bare loop: {x:.1f}×", x <= 2)
    if "nvidia-smi" in ok:
        x = ok["nvidia-smi"]["cpu_us"] / cpu
        line(f"≥ {GOAL_SMI_X:g}× cheaper than nvidia-smi: {x:.0f}×", x >= GOAL_SMI_X)
    for tool in ("nvitop", "gpustat"):
        if tool in ok:
            x = ok[tool]["cpu_us"] / cpu
            line(f"cheaper than {tool}: {x:.1f}× cheaper", x > 1)
    rss = agent["rss_mib"]
    line(f"peak RSS ≤ {GOAL_RSS_MIB:g} MiB: {rss:.1f} MiB", rss <= GOAL_RSS_MIB)
    return lines


def nvml_present() -> str | None:
    """None when NVML answers, else why not."""
    try:
        import pynvml
    except ImportError as exc:
        return f"cannot import pynvml ({exc}; pip install nvidia-ml-py)"
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
    p.add_argument("--child", choices=TOOLS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.seconds, args.max_steps)))
        return 0
    unknown = set(args.tools.split(",")) - set(TOOLS)
    if unknown:
        p.error(f"unknown tools: {', '.join(sorted(unknown))} (known: {', '.join(TOOLS)})")
    why = nvml_present()
    if why is not None:
        print(f"nvml_tools: {why}; run this on a host with an NVIDIA GPU and driver",
              file=sys.stderr)  # fmt: skip
        return 1
    results = [measure(name, args) for name in args.tools.split(",")]
    rows, calls = [], None
    for r in results:
        if r["tool"] == "agent" and "skipped" not in r:
            rows.extend(agent_rows(r))
        elif r["tool"] == "calls":
            calls = r
        else:
            rows.append(r)
    print(table(rows))
    met = goals(rows)
    if met:
        print("\n" + "\n".join(met))
    if calls is not None:
        print()
        print(calls_table(calls) if "skipped" not in calls else f"calls: {calls['skipped']}")
    if args.out:
        report = {"tools": rows, "goals": met, "calls": calls, "raw": results}
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
