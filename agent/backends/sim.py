"""A synthetic fleet: N hosts x M GPUs with believable, varied workloads.

Every GPU runs a sequence of workload phases drawn from its own random stream,
seeded by (seed, GPU UUID), so a fleet replays identically for a given seed:
- training: utilization ~100%, tensor cores busy, power near the limit;
- inference: bursty, a duty cycle of short kernels;
- copy: memory-bound, utilization ~100% with tensor activity ~0;
- held: memory allocated, GPU idle (utilization ~0);
- light: a small model served from one GPU: a few GB, a few percent of the SMs;
- idle.
Values depend on the tick number, never on the wall clock. The per-GPU step is a
few dozen arithmetic operations so one process can drive a thousand GPUs at 1 Hz.

With ``follow`` (the demo), a GPU or slice instead runs what the console says it is
held for, polled from ``/api/v1/agent/allocations/`` with each host's token: free and
pending devices idle with no processes, a running instance's devices run the workload
its name suggests (``workload_for``; a small model's runs on the instance's first
device of the host, its other devices idle), a stopping one idles. MIG and vGPU slices of a
fleet file report per-slice readings; what a mode cannot report is left out, never 0
(a MIG slice has no power, temperature or clocks, and before Hopper no activity at
all; a GPU in MIG mode has no utilization of its own; a vGPU has no GPM tensor metrics).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import time
import urllib.request
from pathlib import Path

from ..protocol import HOST_RE
from . import Emit, HostInfo, Source, run_every

DEFAULT_MODEL = "H100-80GB"
GPM_FAMILIES = ("H100", "H200", "H800", "H20", "GH200", "B100", "B200", "GB200", "B300", "GB300")
DEFAULT_MEMORY = 85_899_345_920
DEFAULT_POWER_LIMIT_MW = 700_000

KINDS = ("training", "inference", "copy", "held", "idle")

# Per GPU "personality": how likely each workload is when a phase ends.
PERSONALITIES = (
    (0.60, 0.10, 0.10, 0.10, 0.10),  # a training box
    (0.10, 0.60, 0.05, 0.10, 0.15),  # an inference server
    (0.25, 0.25, 0.15, 0.15, 0.20),  # a mixed research GPU
    (0.05, 0.10, 0.05, 0.40, 0.40),  # mostly allocated, mostly idle
)

# kind -> gpu_util, mem_util, tensor, occupancy, dram, power fraction, memory fraction
PROFILES = {
    "training": ((94, 100), (25, 55), (45, 85), (35, 65), (30, 60), (0.80, 0.97), (0.70, 0.95)),
    "inference": ((20, 90), (10, 45), (10, 45), (10, 40), (10, 40), (0.30, 0.70), (0.40, 0.70)),
    "copy": ((97, 100), (85, 100), (0, 1), (5, 15), (85, 99), (0.45, 0.65), (0.20, 0.50)),
    "held": ((0, 2), (0, 1), (0, 0), (0, 0), (0, 0), (0.11, 0.14), (0.70, 0.80)),
    "light": ((5, 30), (2, 10), (2, 8), (3, 10), (2, 9), (0.14, 0.22), (0.07, 0.08)),
    "idle": ((0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (0.10, 0.12), (0.004, 0.006)),
}

MAX_SM_CLOCK = 1980
IDLE_SM_CLOCK = 345
MEM_CLOCK = 2619
REASON_IDLE = 0x1
REASON_SW_POWER_CAP = 0x4
XID_CODES = (13, 31, 43, 63, 94)
XID_CHANCE = 2e-6
ECC_CHANCE = 1e-5

# Health facts of a sound H100/H200 (monitoring/health.py: FACTS), sent in a "health"
# event only by a GPU given a fault (``SimGpu.set_fault``, or "fault" in a fleet file).
SOUND_FACTS = {
    "ecc_corrected_aggregate": 0, "ecc_uncorrected_aggregate": 0, "retired_sbe": 0, "retired_dbe": 0,
    "retired_pending": 0, "remap_correctable": 0, "remap_uncorrectable": 0, "remap_pending": 0, "remap_failed": 0,
    "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16, "nvlink_links": 18, "nvlink_down": 0,
}
# fault -> (facts, metrics) it changes; "xid:<code>" and "lost" are events instead.
FAULTS = {
    "none": ({}, {}),
    "ecc_uncorrected": ({"ecc_uncorrected_aggregate": 2}, {"ecc_uncorrected_volatile": 2}),
    "retired_pending": ({"retired_dbe": 1, "retired_pending": 1}, {}),
    "remap_pending": ({"remap_uncorrectable": 1, "remap_pending": 1}, {}),
    "remap_failed": ({"remap_uncorrectable": 8, "remap_failed": 1}, {}),
    "pcie_width": ({"pcie_width": 8}, {}),
    "pcie_gen": ({"pcie_gen": 3}, {"gpu_util": 95}),
    "nvlink_down": ({"nvlink_down": 2}, {}),
    "thermal": ({}, {"clocks_event_reasons": 0x40}),  # hardware thermal slowdown
}


log = logging.getLogger(__name__)
FOLLOW_EVERY_S = 2.0


class FleetError(Exception):
    pass


def workload_for(instance_name: str) -> str:
    """The simulated workload of a running instance, from its name: the demo's seeded
    history (monitoring/demo.py) uses the same rule, so history and live data agree."""
    name = instance_name.lower()
    for words, kind in ((("train", "finetune", "pretrain"), "training"), (("render", "etl"), "copy"),
                        (("spot", "batch-idle", "notebook-idle"), "held"), (("embed", "small"), "light")):
        if any(w in name for w in words):
            return kind
    return "inference"


def allocated_kind(alloc: tuple[str, str, int]) -> str:
    """What a device runs: (state, instance name, the device's rank among the instance's
    devices on its host, by GPU index). A small model ("light") is served from the first."""
    state, name, rank = alloc
    if state != "running":
        return "idle"
    kind = workload_for(name)
    return "idle" if kind == "light" and rank > 0 else kind


def stable_uuid(*parts: str) -> str:
    h = hashlib.sha1("/".join(parts).encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class SimGpu:
    __slots__ = (
        "uuid", "index", "name", "memory_total", "power_limit_mw", "rng", "weights", "kind",
        "left", "burst", "temp", "energy_mj", "pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx",
        "ecc", "pid", "mem_frac", "slices", "mode", "follow", "alloc", "fault", "fault_sent", "gpm",
    )  # fmt: skip

    def __init__(self, spec: dict, seed: int):
        self.uuid = spec["uuid"]
        self.index = spec["index"]
        self.name = spec.get("name", DEFAULT_MODEL)
        self.gpm = reports_gpm(self.name)
        self.memory_total = spec.get("memory_total", DEFAULT_MEMORY)
        self.power_limit_mw = spec.get("power_limit_mw", DEFAULT_POWER_LIMIT_MW)
        self.rng = random.Random(f"{seed}:{self.uuid}")
        self.weights = self.rng.choice(PERSONALITIES)
        self.kind = "idle"
        self.left = 0
        self.burst = 0.3
        self.temp = 30.0 + self.rng.random() * 5
        self.energy_mj = self.rng.randrange(10**7, 10**9)
        self.pcie_tx = self.pcie_rx = self.nvlink_tx = self.nvlink_rx = 0
        self.ecc = 0
        self.pid = 0
        self.mem_frac = 0.005
        self.mode = spec.get("mode")  # None, "mig" or "vgpu"
        self.slices = [SimSlice(sl, seed, self.mode, self.gpm) for sl in spec.get("slices", ())]
        self.follow = False
        self.alloc = ("free", "", 0)
        self.fault = None
        self.fault_sent = True
        if spec.get("fault"):
            self.set_fault(spec["fault"])

    def set_fault(self, fault: str | None) -> None:
        """Simulate a fault from the next tick on: a name of FAULTS, "xid:<code>" or "lost";
        None or "none" clears it."""
        if fault not in (None, "lost") and fault not in FAULTS and not re.fullmatch(r"xid:[0-9]{1,5}", str(fault)):
            raise FleetError(f"unknown fault {fault!r}: one of {', '.join(FAULTS)}, xid:<code> or lost")
        self.fault = None if fault == "none" else fault
        self.fault_sent = False

    def fault_records(self, now: float, m: dict) -> list[dict]:
        """The fault's changes to this tick's metrics (in place), and its events the first time."""
        facts, metrics = FAULTS.get(self.fault or "none", ({}, {}))
        reasons = m.get("clocks_event_reasons", 0)
        m.update(metrics)
        if "clocks_event_reasons" in metrics:
            m["clocks_event_reasons"] |= reasons
        if self.fault_sent:
            return []
        self.fault_sent = True
        fault = self.fault or ""
        if fault == "lost":
            return [{"t": now, "gpu": self.uuid, "event": {"kind": "gpu_lost", "message": "GPU is lost"}}]
        if fault.startswith("xid:"):
            code = int(fault[4:])
            return [{"t": now, "gpu": self.uuid, "event": {"kind": "xid", "code": code, "message": f"Xid {code}"}}]
        return [{"t": now, "gpu": self.uuid, "event": {"kind": "health", "facts": {**SOUND_FACTS, **facts}}}]

    def hello(self) -> dict:
        return {
            "uuid": self.uuid,
            "index": self.index,
            "name": self.name,
            "memory_total": self.memory_total,
            "power_limit_mw": self.power_limit_mw,
            "mig_mode": self.mode == "mig",
            "slices": [sl.hello() for sl in self.slices if self.mode == "mig"],
        }

    def _follow_phase(self) -> None:
        kind = allocated_kind(self.alloc)
        if kind == self.kind and self.left > 0:
            return
        self.kind = kind
        self.left = 10**9
        lo, hi = PROFILES[kind][6]
        self.mem_frac = self.rng.uniform(lo, hi)
        self.pid = _stable_pid(self.alloc[1], self.uuid) if kind != "idle" else 0

    def _next_phase(self) -> None:
        rng = self.rng
        self.kind = rng.choices(KINDS, self.weights)[0]
        self.left = rng.randrange(60, 900)
        self.burst = rng.uniform(0.2, 0.6)
        lo, hi = PROFILES[self.kind][6]
        self.mem_frac = rng.uniform(lo, hi)
        self.pid = rng.randrange(1000, 4_000_000) if self.kind != "idle" else 0

    def step(self, dt: float, slow: bool) -> tuple[dict, list[dict] | None, dict | None]:
        """Advance one tick: (metrics, processes, event or None)."""
        if self.follow:
            self._follow_phase()
        elif self.left <= 0:
            self._next_phase()
        self.left -= 1
        rng = self.rng
        rand = rng.random
        util_r, memu_r, tens_r, occ_r, dram_r, pow_r, _ = PROFILES[self.kind]
        active = 1.0 if self.kind != "inference" else (1.0 if rand() < self.burst else 0.15)

        def pick(bounds):
            lo, hi = bounds
            return lo + (hi - lo) * rand()

        util = pick(util_r) * active
        power_frac = pick(pow_r)
        if self.kind == "inference":
            power_frac = 0.12 + (power_frac - 0.12) * active
        power = int(self.power_limit_mw * power_frac)
        self.temp += (28 + 52 * power_frac - self.temp) * 0.08
        mem_used = int(self.memory_total * self.mem_frac)
        busy = util > 5
        sm_clock = MAX_SM_CLOCK - int(225 * rand()) if busy else IDLE_SM_CLOCK
        reasons = 0 if busy else REASON_IDLE
        if power_frac > 0.93:
            reasons |= REASON_SW_POWER_CAP
        if rand() < ECC_CHANCE:
            self.ecc += 1
        m = {
            "gpu_util": int(util),
            "mem_util": int(pick(memu_r) * active),
            "mem_used": mem_used,
            "mem_total": self.memory_total,
            "power_mw": power,
            "power_limit_mw": self.power_limit_mw,
            "temp_c": int(self.temp),
            "sm_clock_mhz": sm_clock,
            "mem_clock_mhz": MEM_CLOCK,
            "clocks_event_reasons": reasons,
            "ecc_corrected_volatile": self.ecc,
            "ecc_uncorrected_volatile": 0,
        }
        self.energy_mj += int(power * dt)
        if busy:
            traffic = int(util * 2.5e8 * dt)
            self.pcie_tx += traffic // 20
            self.pcie_rx += traffic // 10
            if self.kind == "training":
                self.nvlink_tx += traffic * 4
                self.nvlink_rx += traffic * 4
        procs = None
        if self.pid:
            procs = [{"pid": self.pid, "used_memory": max(0, mem_used - 520_093_696),
                      **_describe(self.kind, self.pid, self.alloc[1])}]
        if slow:
            m["energy_mj"] = self.energy_mj
            m["pcie_tx_bytes"] = self.pcie_tx
            m["pcie_rx_bytes"] = self.pcie_rx
            m["nvlink_tx_bytes"] = self.nvlink_tx
            m["nvlink_rx_bytes"] = self.nvlink_rx
            if self.gpm:
                m["sm_occupancy_pct"] = round(pick(occ_r) * active, 1)
                m["tensor_active_pct"] = round(pick(tens_r) * active, 1)
                m["dram_bw_util_pct"] = round(pick(dram_r) * active, 1)
            if procs:
                procs[0]["sm_util"] = int(util)
        event = None
        if self.kind != "idle" and rand() < XID_CHANCE:
            code = rng.choice(XID_CODES)
            event = {"kind": "xid", "code": code, "message": f"Xid {code}"}
        return m, procs, event


def reports_gpm(name: str) -> bool:
    """Whether a GPU of this name reports NVML's GPM metrics (SM occupancy, tensor-core
    activity, DRAM bandwidth): Hopper and later only, as the NVML backend finds by asking
    each device. A simulated A100 reports none, like a real one."""
    model = name.upper().removeprefix("NVIDIA ").strip()
    return model.startswith(GPM_FAMILIES)


def _stable_pid(instance: str, uuid: str) -> int:
    return 1000 + int(hashlib.sha1(f"{instance}/{uuid}".encode()).hexdigest()[:6], 16) % 3_999_000


COMMANDS = {
    "training": "python train.py --config configs/llm.yaml --bf16",
    "inference": "python -m vllm.entrypoints.openai.api_server --port 8000",
    "copy": "python etl/shuffle.py --shards 512",
    "held": "python notebook_kernel.py",
}


def _describe(kind: str, pid: int, instance: str) -> dict:
    """What /proc would say about the simulated process (the nvml agent reads it)."""
    container = hashlib.sha1(f"{instance}/{pid}".encode()).hexdigest()[:12]
    cmd = COMMANDS.get(kind, "python main.py")
    return {"name": cmd.split()[0] if " -m " not in cmd else cmd.split()[2].split(".")[0], "user": "ubuntu",
            "cmd": cmd, "cgroup": container if instance else f"/user.slice/pid-{pid}"}


class SimSlice:
    """A MIG slice or a vGPU of a simulated GPU, with its own workload."""

    def __init__(self, spec: dict, seed: int, mode: str | None, gpm: bool = True):
        self.uuid = spec["uuid"]
        self.gpm = gpm  # a MIG slice's activity is GPM's: none before Hopper
        self.gpu_instance_id = spec.get("gpu_instance_id", 0)
        self.profile = spec.get("profile", "")
        self.memory_total = spec["memory_total"]
        self.mode = mode
        self.rng = random.Random(f"{seed}:{self.uuid}")
        self.alloc = ("free", "", 0)
        self.kind = "idle"
        self.mem_frac = 0.0
        self.pid = 0
        self.activity = 0.0

    def hello(self) -> dict:
        return {"uuid": self.uuid, "gpu_instance_id": self.gpu_instance_id, "profile": self.profile,
                "memory_total": self.memory_total}

    def step(self, slow: bool) -> tuple[dict, list[dict] | None]:
        kind = allocated_kind(self.alloc)
        if kind != self.kind:
            self.kind = kind
            lo, hi = PROFILES[kind][6]
            self.mem_frac = self.rng.uniform(lo, hi) if kind != "idle" else 0.0
            self.pid = _stable_pid(self.alloc[1], self.uuid) if kind != "idle" else 0
        rand = self.rng.random
        util_r, memu_r, tens_r, occ_r, dram_r, _, _ = PROFILES[kind]
        active = 1.0 if kind != "inference" else (1.0 if rand() < 0.4 else 0.15)

        def pick(bounds):
            return round((bounds[0] + (bounds[1] - bounds[0]) * rand()) * active, 1)

        util = pick(util_r)
        self.activity = util / 100
        mem_used = int(self.memory_total * self.mem_frac)
        m = {"mem_used": mem_used, "mem_total": self.memory_total}
        if self.mode == "vgpu":
            m |= {"gpu_util": util, "mem_util": pick(memu_r)}
        elif slow and self.gpm:  # MIG: GPM per GPU instance, over the slow interval (NVML has no
            # utilization on MIG devices, so an A100's slices report memory only)
            m |= {"gpu_util": util, "tensor_active_pct": pick(tens_r), "sm_occupancy_pct": pick(occ_r),
                  "dram_bw_util_pct": pick(dram_r)}
        procs = None
        if self.pid:
            procs = [{"pid": self.pid, "used_memory": max(0, mem_used - 300_000_000),
                      **_describe(kind, self.pid, self.alloc[1])}]
        return m, procs


class SimHost:
    def __init__(self, host: str, gpus: list[SimGpu], token: str | None = None):
        self.host = host
        self.gpus = gpus
        self.token = token


class SimSource(Source):
    name = "sim"

    def __init__(
        self,
        hosts: list[SimHost],
        *,
        interval: float = 1.0,
        slow_interval: float = 5.0,
        once: bool = False,
        spread: bool = False,
    ):
        super().__init__()
        self.fleet = hosts
        self.interval = interval
        self.slow_every = max(1, round(slow_interval / interval))
        self.once = once
        # All hosts sample at the same moment, or (spread) each at its own moment of the
        # interval, host i of n at i/n of it, as n separate agents started at different
        # times would.
        self.spread = spread
        self.ticks = 0

    @classmethod
    def synthetic(cls, hosts: int, gpus: int, *, prefix: str = "sim-host", seed: int = 0, **kw):
        fleet = []
        for h in range(hosts):
            name = f"{prefix}-{h:03d}"
            specs = [{"uuid": stable_uuid(name, str(i)), "index": i} for i in range(gpus)]
            fleet.append(SimHost(name, [SimGpu(s, seed) for s in specs]))
        return cls(fleet, **kw)

    @classmethod
    def from_fleet(cls, data: list, *, seed: int = 0, **kw):
        return cls([SimHost(h["host"], [SimGpu(g, seed) for g in h["gpus"]], h.get("token"))
                    for h in data], **kw)  # fmt: skip

    def hosts(self) -> list[HostInfo]:
        return [HostInfo(h.host, [g.hello() for g in h.gpus], h.token) for h in self.fleet]

    def tick(self, now: float | None = None) -> dict[str, list[dict]]:
        """One sample of every GPU of the fleet, by host."""
        now = time.time() if now is None else now
        slow = self.ticks % self.slow_every == 0
        self.ticks += 1
        return {host.host: self.sample(host, now, slow) for host in self.fleet}

    def sample(self, host: SimHost, now: float, slow: bool) -> list[dict]:
        """One sample of every GPU of one host."""
        records = []
        for gpu in host.gpus:
            m, procs, event = gpu.step(self.interval, slow)
            if gpu.slices:
                m, procs = self._with_slices(gpu, m, slow, now, records)
            record = {"t": now, "gpu": gpu.uuid, "m": m}
            if procs is not None:
                record["procs"] = procs
            records.append(record)
            if event is not None:
                records.append({"t": now, "gpu": gpu.uuid, "event": event})
            if not gpu.fault_sent or gpu.fault:
                records.extend(gpu.fault_records(now, m))
        return records

    @staticmethod
    def _with_slices(gpu: SimGpu, m: dict, slow: bool, now: float, records: list) -> tuple[dict, None]:
        """Slice records first; the GPU's own reading then follows its slices' load."""
        used, busy = 0, 0.0
        for sl in gpu.slices:
            sm, sprocs = sl.step(slow)
            record = {"t": now, "gpu": gpu.uuid, "slice": sl.uuid, "m": sm}
            if sprocs:
                record["procs"] = sprocs
            records.append(record)
            used += sm["mem_used"]
            busy += sl.activity / len(gpu.slices)
        power_frac = 0.10 + 0.8 * busy
        m = dict(m, mem_used=used + 500_000_000, power_mw=int(gpu.power_limit_mw * power_frac),
                 sm_clock_mhz=MAX_SM_CLOCK - 100 if busy > 0.05 else IDLE_SM_CLOCK,
                 clocks_event_reasons=0 if busy > 0.05 else REASON_IDLE)
        gpu.temp += (28 + 52 * power_frac - gpu.temp) * 0.08
        m["temp_c"] = int(gpu.temp)
        if gpu.mode == "mig":
            # In MIG mode NVML has no utilization of the whole GPU, and GPM is per GPU instance.
            for name in ("gpu_util", "mem_util", "tensor_active_pct", "sm_occupancy_pct", "dram_bw_util_pct"):
                m.pop(name, None)
        else:
            m["gpu_util"] = int(100 * busy)
            m.pop("tensor_active_pct", None)  # vGPU hosts: no GPM split per vGPU; the sum is unknown
        return m, None

    def follow(self, base_url: str) -> None:
        """Run what the console says each device is held for (see the module doc)."""
        self.follow_url = base_url.rstrip("/") + "/api/v1/agent/allocations/"
        for host in self.fleet:
            for gpu in host.gpus:
                gpu.follow = True

    def poll_allocations(self) -> None:
        for host in self.fleet:
            if not host.token:
                continue
            request = urllib.request.Request(self.follow_url, headers={"Authorization": f"Bearer {host.token}"})
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    devices = json.loads(response.read())["devices"]
            except (OSError, ValueError, KeyError) as exc:
                log.warning("allocations of %s cannot be read (%s); keeping the last ones", host.host, exc)
                continue
            apply_allocations(host, devices)

    def start(self, emit: Emit, loop=None) -> None:
        if getattr(self, "follow_url", None):
            self.poll_allocations()
            self.spawn(lambda: run_every(self.stop_event, FOLLOW_EVERY_S, self.poll_allocations), "sim-follow")

        def step():
            for host, records in self.tick().items():
                emit(host, records)
            if self.once:
                self.done.set()
                self.stop_event.set()

        if self.spread and len(self.fleet) > 1 and not self.once:
            self.spawn(lambda: self._run_spread(emit), "sim")
            return
        self.spawn(lambda: run_every(self.stop_event, self.interval, step), "sim")

    def _run_spread(self, emit: Emit) -> None:
        """Each host samples once an interval at its own offset (host i of n at i/n of
        the interval), on a fixed schedule; a host whose moment has passed by more than
        an interval skips to its next one."""
        n, began = len(self.fleet), time.monotonic()
        while not self.stop_event.is_set():
            cycle = self.ticks
            slow = cycle % self.slow_every == 0
            self.ticks += 1
            for i, host in enumerate(self.fleet):
                due = began + (cycle + i / n) * self.interval
                delay = due - time.monotonic()
                if delay < -self.interval:
                    continue
                if delay > 0 and self.stop_event.wait(delay):
                    return
                emit(host.host, self.sample(host, time.time(), slow))
            behind = time.monotonic() - (began + self.ticks * self.interval)
            if behind > self.interval:  # overran by a whole interval: start afresh from now
                began += (int(behind / self.interval)) * self.interval


def apply_allocations(host: SimHost, devices: dict) -> None:
    """``devices``: {uuid: {"state", "instance"}} of the held ones; the rest are free.
    Each device's rank counts the same instance's devices before it (by GPU index)."""
    seen: dict[str, int] = {}

    def alloc(uuid: str) -> tuple[str, str, int]:
        held = devices.get(uuid) or {}
        name = held.get("instance", "")
        rank = seen.get(name, 0)
        seen[name] = rank + 1
        return held.get("state", "free"), name, rank

    for gpu in sorted(host.gpus, key=lambda g: g.index):
        gpu.alloc = alloc(gpu.uuid)
    for gpu in sorted(host.gpus, key=lambda g: g.index):
        for sl in sorted(gpu.slices, key=lambda x: x.gpu_instance_id):
            sl.alloc = alloc(sl.uuid)


def load_fleet(path: str | Path) -> list[dict]:
    """Read and check a fleet file; raises FleetError naming the bad field."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise FleetError(f"cannot read fleet file {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise FleetError(f"fleet file {path} is not valid JSON") from None
    except RecursionError:
        raise FleetError(f"fleet file {path}: JSON nested too deeply") from None
    if not isinstance(data, list) or not data:
        raise FleetError(f"fleet file {path} must hold a non-empty JSON list of hosts")
    seen_hosts, seen_gpus = set(), set()
    for i, host in enumerate(data):
        where = f"fleet file {path}: host #{i}"
        if not isinstance(host, dict) or not HOST_RE.match(str(host.get("host", ""))):
            raise FleetError(f'{where}: "host" must be a host name ([A-Za-z0-9._-], 1-253)')
        if host["host"] in seen_hosts:
            raise FleetError(f"{where}: host {host['host']!r} appears twice")
        seen_hosts.add(host["host"])
        if "token" in host and (not isinstance(host["token"], str) or not host["token"]):
            raise FleetError(f'{where}: "token" must be a non-empty string')
        gpus = host.get("gpus")
        if not isinstance(gpus, list) or not gpus:
            raise FleetError(f'{where}: "gpus" must be a non-empty list')
        for j, gpu in enumerate(gpus):
            _check_gpu(f"{where} gpus[{j}]", gpu, seen_gpus)
    return data


def _check_gpu(where: str, gpu, seen: set) -> None:
    if not isinstance(gpu, dict):
        raise FleetError(f"{where}: must be an object")
    if not isinstance(gpu.get("uuid"), str) or not gpu["uuid"].startswith("GPU-"):
        raise FleetError(f"{where}.uuid must be a string starting with GPU-")
    if gpu["uuid"] in seen:
        raise FleetError(f"{where}.uuid {gpu['uuid']} appears twice in the fleet")
    seen.add(gpu["uuid"])
    for key, required in (("index", True), ("memory_total", False), ("power_limit_mw", False)):
        value = gpu.get(key)
        if value is None and not required:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise FleetError(f"{where}.{key} must be a non-negative integer")
    if "name" in gpu and not isinstance(gpu["name"], str):
        raise FleetError(f"{where}.name must be a string")
    if gpu.get("mode") not in (None, "mig", "vgpu"):
        raise FleetError(f'{where}.mode must be "mig" or "vgpu"')
    fault = gpu.get("fault")
    if fault is not None and not (isinstance(fault, str) and (fault in FAULTS or fault == "lost"
                                                                or re.fullmatch(r"xid:[0-9]{1,5}", fault))):
        raise FleetError(f"{where}.fault must be one of {', '.join(FAULTS)}, lost or xid:<code>")
    slices = gpu.get("slices", [])
    if not isinstance(slices, list) or (slices and gpu.get("mode") is None):
        raise FleetError(f"{where}.slices must be a list, and needs a mode")
    for k, sl in enumerate(slices):
        if not isinstance(sl, dict) or not str(sl.get("uuid", "")).startswith(("MIG-", "VGPU-")):
            raise FleetError(f"{where}.slices[{k}].uuid must be a string starting with MIG- or VGPU-")
        if isinstance(sl.get("memory_total"), bool) or not isinstance(sl.get("memory_total"), int):
            raise FleetError(f"{where}.slices[{k}].memory_total must be an integer")
