"""What the agent costs per GPU-sample: CPU time, wall time and memory, per backend.

Each backend runs in a subprocess of its own (so its peak RSS is its own), samples
as fast as it can into a null sink (the agent's outbox: records are numbered,
cleaned and JSON-encoded exactly as for sending, then thrown away), and reports.

    python bench/agent_cost.py                    # sim (1,000 GPUs) and replay, side by side
    python bench/agent_cost.py --backend nvml     # on a GPU host: nvml beside sim and replay
    python bench/agent_cost.py --spool            # also write every record to a spool and ack it
    python bench/agent_cost.py --backend fake-nvml --backend fake-bare   # no GPU needed

A GPU-sample is one GPU read once on the fast path, with its share of the slow set
(GPM) and of the counter set (energy, PCIe/NVLink bytes, per-process SM use) at the
nvml defaults, 1 s : 1 s : 60 s (the sim keeps a 5 s slow set). This times the sampling
and encoding alone; bench/agent_process.py measures the agent as a whole process. fake-nvml runs the nvml backend over a pynvml whose
calls answer at once, and fake-bare a plain loop over the same calls: the difference
is what the agent's own Python costs per GPU-sample (sampling, cleaning, encoding).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TRACE = REPO / "agent" / "traces" / "h200_mixed.jsonl"
SLOW_EVERY = 1  # fast samples per slow sample at the nvml defaults (1 s, 1 s)
COUNTER_EVERY = 60  # fast samples per counter sample at the defaults (1 s, 60 s)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Sink:
    """The agent's outbox, emptied after every step; optionally a spool behind it."""

    def __init__(self, spool: bool):
        from agent.outbox import Outbox

        self.outboxes: dict[str, Outbox] = {}
        self.spools = {}
        self.tmp = tempfile.TemporaryDirectory() if spool else None
        self.make_outbox = lambda: Outbox("0" * 32)

    def emit(self, host: str, records: list[dict]) -> None:
        box = self.outboxes.get(host)
        if box is None:
            box = self.outboxes[host] = self.make_outbox()
        box.put(records)
        rows = box.take()
        if self.tmp is not None and rows:
            self._spool(host, rows)

    def _spool(self, host: str, rows) -> None:
        from agent.spool import Spool

        spool = self.spools.get(host)
        if spool is None:
            spool = self.spools[host] = Spool(Path(self.tmp.name) / host, max_records=10**7)
        spool.append("0" * 32, rows)
        spool.ack("0" * 32, rows[-1][0])


def sim_step(args):
    from agent.backends.sim import SimSource

    source = SimSource.synthetic(args.hosts, args.gpus, slow_interval=5.0)

    def step(sink: Sink) -> int:
        for host, records in source.tick().items():
            sink.emit(host, records)
        return args.hosts * args.gpus

    return step, f"{args.hosts * args.gpus} GPUs"


def replay_step(args):
    from agent.backends.replay import ReplaySource, Trace

    if not Path(args.trace).exists():
        raise SystemExit(f"agent_cost: trace {args.trace} not found (give --trace PATH)")
    source = ReplaySource(Trace.load(args.trace), host="bench", speed=1000)
    frames = source.frames()

    def step(sink: Sink) -> int:
        _, line, m = next(frames)
        sink.emit("bench", [source.record(line, m, time.time())])
        return 1

    return step, "1 GPU (trace)"


def nvml_step(args, nvml=None, what="GPU(s)"):
    from agent.backends.nvml import NvmlSource, NvmlUnavailable

    source = NvmlSource(host="bench", nvml=nvml)
    try:
        source.open()
    except NvmlUnavailable as exc:
        raise SystemExit(f"agent_cost: {exc}") from None
    count = [0]

    def step(sink: Sink) -> int:
        sink.emit("bench", source.sample_fast())
        if count[0] % SLOW_EVERY == 0:
            sink.emit("bench", source.sample_slow())
        if count[0] % COUNTER_EVERY == 0:
            sink.emit("bench", source.sample_counters())
        count[0] += 1
        return len(source.gpus)

    return step, f"{len(source.gpus)} {what}"


def fake_nvml_step(args):
    return nvml_step(args, nvml=FakeNvml(args.fake_gpus), what="fake GPUs")


# -- a minimal in-process pynvml, for the Python cost of the nvml backend without a GPU ----


class _FakeNvmlError(Exception):
    value = 999


def _fake_error(name: str, value: int):
    return type(f"NVMLError_{name}", (_FakeNvmlError,), {"value": value})


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeNvml:
    """Just enough of pynvml, answering at once with constants: what the agent's own Python
    costs beside a bare loop over the same calls (the NVML calls themselves cost ~nothing)."""

    NVMLError = _FakeNvmlError
    NVMLError_NotSupported = _fake_error("NotSupported", 3)
    NVMLError_NoPermission = _fake_error("NoPermission", 4)
    NVMLError_NotFound = _fake_error("NotFound", 6)
    NVMLError_Timeout = _fake_error("Timeout", 10)
    NVMLError_FunctionNotFound = _fake_error("FunctionNotFound", 13)
    NVMLError_GpuIsLost = _fake_error("GpuIsLost", 15)
    NVMLError_Unknown = _fake_error("Unknown", 999)
    NVMLError_InvalidArgument = _fake_error("InvalidArgument", 2)
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPM_METRICS_GET_VERSION = 1
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, gpus: int = 8):
        self.handles = [_Obj(index=i) for i in range(gpus)]
        self._util = _Obj(gpu=87, memory=31)
        self._mem = _Obj(total=150 * 2**30, used=40 * 2**30, free=110 * 2**30)
        self._procs = [_Obj(pid=4242, usedGpuMemory=30 * 2**30)]

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlDeviceGetCount(self):
        return len(self.handles)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.handles[i]

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h.index:08d}-0000-0000-0000-000000000000"

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetPciInfo(self, h):
        return _Obj(busId=f"00000000:{h.index + 0x18:02X}:00.0".encode())

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetMigMode(self, h):
        return [0, 0]

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._mem

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._util

    def nvmlDeviceGetPowerUsage(self, h):
        return 612_345

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 61

    def nvmlDeviceGetClockInfo(self, h, which):
        return 1980 if which == 1 else 3201

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 4

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return 0

    def nvmlDeviceGetFanSpeed(self, h):
        raise self.NVMLError_NotSupported()  # as on an H200

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return self._procs

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return 123_456_789

    def nvmlDeviceGetFieldValues(self, h, requests):
        return [_Obj(fieldId=r[0], scopeId=r[1], valueType=3, nvmlReturn=0,
                     value=_Obj(ullVal=1000)) for r in requests]  # fmt: skip

    def nvmlDeviceGetProcessUtilization(self, h, since):
        return [_Obj(pid=4242, timeStamp=since + 1, smUtil=55)]

    def nvmlGpmQueryDeviceSupport(self, h):
        return _Obj(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self):
        return _Obj()

    def nvmlGpmSampleFree(self, sample):
        pass

    def nvmlGpmSampleGet(self, h, sample):
        return sample

    def nvmlGpmMigSampleGet(self, h, gi, sample):
        return sample

    class c_nvmlGpmMetricsGet_t:  # noqa: N801 (pynvml's name)
        def __init__(self):
            self.metrics = [_Obj(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]

    def nvmlGpmMetricsGet(self, request):
        for metric in request.metrics[: request.numMetrics]:
            metric.value = 42.0
        return request

    def nvmlEventSetCreate(self):
        return object()

    def nvmlDeviceRegisterEvents(self, h, kinds, event_set):
        pass

    def nvmlEventSetWait(self, event_set, timeout_ms):
        time.sleep(timeout_ms / 1000)  # as NVML: blocks until an event or the timeout
        raise self.NVMLError_Timeout()

    def nvmlEventSetFree(self, event_set):
        pass


def fake_bare_step(args):
    """A bare loop over the fake's fast calls (as bench/nvml_tools.py's bare loop)."""
    nv = FakeNvml(args.fake_gpus)
    handles = nv.handles
    calls = [
        (nv.nvmlDeviceGetUtilizationRates, ()),
        (nv.nvmlDeviceGetMemoryInfo, ()),
        (nv.nvmlDeviceGetPowerUsage, ()),
        (nv.nvmlDeviceGetTemperature, (0,)),
        (nv.nvmlDeviceGetClockInfo, (1,)),
        (nv.nvmlDeviceGetClockInfo, (2,)),
        (nv.nvmlDeviceGetCurrentClocksEventReasons, ()),
        (nv.nvmlDeviceGetTotalEccErrors, (0, 0)),
        (nv.nvmlDeviceGetTotalEccErrors, (1, 0)),
        (nv.nvmlDeviceGetComputeRunningProcesses, ()),
    ]

    def step(sink) -> int:
        for h in handles:
            for fn, extra in calls:
                try:
                    fn(h, *extra)
                except nv.NVMLError:
                    pass
        return len(handles)

    return step, f"{len(handles)} fake GPUs"


STEPS = {"sim": sim_step, "replay": replay_step, "nvml": nvml_step,
         "fake-nvml": fake_nvml_step, "fake-bare": fake_bare_step}  # fmt: skip


def child(args) -> None:
    sink = Sink(args.spool)
    step, what = STEPS[args.child](args)
    step(sink)  # warm up: imports, first allocations
    samples = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < args.seconds:
        samples += step(sink)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"backend": args.child, "what": what, "samples": samples,
                      "cpu_us": cpu / samples * 1e6, "wall_us": wall / samples * 1e6,
                      "rss_mib": peak_rss_mib(), "spool": args.spool}))  # fmt: skip


def measure(backend: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", backend, "--seconds", str(args.seconds),
           "--hosts", str(args.hosts), "--gpus", str(args.gpus), "--trace", str(args.trace),
           "--fake-gpus", str(args.fake_gpus)]  # fmt: skip
    if args.spool:
        cmd.append("--spool")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return {"backend": backend, "error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    rows = [
        "| backend | GPUs | GPU-samples | CPU µs / GPU-sample | wall µs / GPU-sample | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['backend']} | — | — | — | — | {r['error']} |")
            continue
        rows.append(f"| {r['backend']}{' + spool' if r['spool'] else ''} | {r['what']} | "
                    f"{r['samples']:,} | {r['cpu_us']:.1f} | {r['wall_us']:.1f} | "
                    f"{r['rss_mib']:.1f} |")  # fmt: skip
    return "\n".join(rows)


def ratios(results: list[dict]) -> list[str]:
    ok = {r["backend"]: r for r in results if "error" not in r}
    lines = []
    if "sim" in ok and "replay" in ok:
        sim, rep = ok["sim"], ok["replay"]
        lines.append(f"- replay / sim CPU per GPU-sample: {rep['cpu_us'] / sim['cpu_us']:.2f}x")
        lines.append(f"- replay / sim peak RSS: {rep['rss_mib'] / sim['rss_mib']:.2f}x")
    if "fake-nvml" in ok and "fake-bare" in ok:
        own = ok["fake-nvml"]["cpu_us"] - ok["fake-bare"]["cpu_us"]
        lines.append(f"- fake-nvml - fake-bare: the agent's own Python costs {own:.1f} µs "
                     "CPU per GPU-sample")  # fmt: skip
    if "nvml" in ok and "sim" in ok:
        lines.append(
            f"- nvml / sim CPU per GPU-sample: {ok['nvml']['cpu_us'] / ok['sim']['cpu_us']:.2f}x"
        )
    for name, r in ok.items():
        if name == "fake-bare":
            continue
        if name in ("nvml", "fake-nvml"):
            share = r["cpu_us"] * 8 / 1e6 * 100
            lines.append(f"- {name}: an 8-GPU host at 1 Hz would take {share:.2f}% of one core")
        else:
            share = r["cpu_us"] * 1000 / 1e6 * 100
            lines.append(f"- {name}: 1,000 GPUs at 1 Hz would take {share:.1f}% of one core")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", action="append", choices=sorted(STEPS),
                   help="add a backend (sim and replay are always measured)")  # fmt: skip
    p.add_argument("--seconds", type=float, default=3.0, help="time per backend (default 3)")
    p.add_argument("--hosts", type=int, default=125, help="sim hosts (default 125)")
    p.add_argument("--gpus", type=int, default=8, help="sim GPUs per host (default 8)")
    p.add_argument("--fake-gpus", type=int, default=8,
                   help="GPUs of the fake-nvml and fake-bare backends (default 8)")  # fmt: skip
    p.add_argument("--trace", default=str(TRACE), help="trace for the replay backend")
    p.add_argument("--spool", action="store_true", help="also spool and ack every record")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--child", choices=sorted(STEPS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    backends = ["sim", "replay", *[b for b in args.backend or [] if b not in ("sim", "replay")]]
    results = [measure(b, args) for b in backends]
    print(table(results))
    print()
    print("\n".join(ratios(results)))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
