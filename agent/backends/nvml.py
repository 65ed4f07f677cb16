"""Real GPUs through NVML (pynvml, imported only here and only when used).

What is read when (on the agent's event loop as timers; each on a thread of its own
when the source runs without one):
- sampling, every ``interval`` (default 1 s): the fast set (utilization, memory, power,
  temperature, clocks, clock-event reasons, ECC, fan, per-process memory: microseconds
  per call) and, on the tick when it is due, every ``slow_interval`` (default 1 s: every
  tick), the slow set: GPM metrics (Hopper and later; also per MIG slice), rates over
  the interval (two calls per device, tens of microseconds), merged into the same
  record as the fast set, so a reading carries its tensor activity and the slow set
  costs no wakeup, record or frame of its own;
- counters, every ``counter_interval`` (default 60 s): total energy, the PCIe/NVLink
  byte counters (field values) and per-process SM use. The counters are cumulative, so
  reading them rarely loses nothing but time resolution, and they are the dearest calls
  (milliseconds each, once a minute);
- XID errors, pushed by the driver through an NVML event set, on a thread of their own
  (it blocks in NVML, waiting 5 s at a time).

A call that a GPU does not support is remembered and not made again, and its
metric is absent from the samples, never 0. A GPU that is lost becomes a
``gpu_lost`` event; the others keep being sampled.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import diagnostics
from ..procinfo import ProcessNames
from ..protocol import MAX_SLICES

if TYPE_CHECKING:
    import asyncio
from . import Emit, HostInfo, Source, run_every

log = logging.getLogger("gpuconsole.agent")

ALL_LINKS = 0xFFFFFFFF
NO_GPU_INSTANCE = 0xFFFFFFFF
LOST_PROBE_S = 30.0
MIG_RESCAN_S = 60.0
# An XID wait that times out wakes the process for nothing: wait long. stop() does not
# wait for it; a process that exits while it waits lets the exit close NVML.
EVENT_WAIT_MS = 5000
XID_JOIN_S = 0.2

# metric -> candidate field values, tried in order: (pynvml constant, numeric id, scope, scale)
FIELD_METRICS = {
    "pcie_tx_bytes": [("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 197, 0, 1)],
    "pcie_rx_bytes": [("NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 198, 0, 1)],
    "nvlink_tx_bytes": [
        ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138, ALL_LINKS, 1024),  # KiB
        ("NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES", 202, ALL_LINKS, 1),
    ],
    "nvlink_rx_bytes": [
        ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139, ALL_LINKS, 1024),
        ("NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES", 204, ALL_LINKS, 1),
    ],
}
# nvmlFieldValue_t.valueType -> the member of the value union that holds it
FIELD_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                      6: "usVal"}  # fmt: skip

# GPM metric -> our name; (pynvml constant, numeric id)
GPM_METRICS = {
    "sm_occupancy_pct": ("NVML_GPM_METRIC_SM_OCCUPANCY", 3),
    "tensor_active_pct": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5),
    "dram_bw_util_pct": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 10),
}
# NVML utilization does not exist on MIG slices; GPM's graphics activity is the same
# measure (share of time any kernel ran), so slices report it as gpu_util.
GPM_SLICE_METRICS = {**GPM_METRICS, "gpu_util": ("NVML_GPM_METRIC_GRAPHICS_UTIL", 1)}

# nvmlDeviceGetVirtualizationMode -> what the hello says
VIRTUALIZATION = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
_NOT_IN_UUID = re.compile(r"[^A-Za-z0-9/-]")

XID_MESSAGES = {
    13: "Graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double-bit ECC error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


class NvmlUnavailable(Exception):
    pass


class _GpuLost(Exception):
    pass


@dataclass
class _Device:
    handle: object
    uuid: str
    unsupported: set = field(default_factory=set)
    gpm_ok: bool = False
    gpm_take: object = None  # sample -> fills it (nvmlGpmSampleGet or nvmlGpmMigSampleGet)
    gpm_samples: tuple | None = None  # two samples, allocated once, used in turn
    gpm_request: object = None  # one nvmlGpmMetricsGet_t, metric ids set once
    gpm_names: tuple = ()
    gpm_primed: bool = False


@dataclass
class _Slice(_Device):
    gpu_instance_id: int = 0
    profile: str = ""
    memory_total: int = 0
    vgpu: int | None = None  # a vGPU's instance id (host in vGPU mode), else a MIG slice

    def hello(self) -> dict:
        return {
            "uuid": self.uuid,
            "gpu_instance_id": self.gpu_instance_id,
            "profile": self.profile,
            "memory_total": self.memory_total,
        }


@dataclass
class _Gpu(_Device):
    index: int = 0
    name: str = ""
    memory_total: int = 0
    pci_bus_id: str | None = None
    power_limit_mw: int | None = None
    mig_mode: bool = False
    virtualization: str | None = None  # VIRTUALIZATION's words; None: NVML cannot say
    slices: list[_Slice] = field(default_factory=list)
    reads: list = field(default_factory=list)  # the one-number fast reads it supports
    fields: dict = field(default_factory=dict)  # metric -> index of the candidate in use
    field_request: list | None = None  # [(metric, field id, scope, scale)] for those choices
    lost: bool = False
    last_probe: float = 0.0
    proc_ts: int = 0
    proc_sm: dict = field(default_factory=dict)
    vgpu_ts: int = 0
    facts: dict | None = None  # the health facts last sent

    def hello(self) -> dict:
        entry = {
            "uuid": self.uuid,
            "index": self.index,
            "name": self.name,
            "memory_total": self.memory_total,
            "mig_mode": self.mig_mode,
            "slices": [s.hello() for s in self.slices],
        }
        if self.pci_bus_id:
            entry["pci_bus_id"] = self.pci_bus_id
        if self.power_limit_mw:
            entry["power_limit_mw"] = self.power_limit_mw
        if self.virtualization:
            entry["virtualization"] = self.virtualization
        return entry


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _handle_key(handle) -> int:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or id(handle)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


def _field_value(fv):
    return getattr(fv.value, FIELD_VALUE_MEMBER.get(fv.valueType, "ullVal"))


_names = ProcessNames()


def _proc_list(running, sm: dict) -> list[dict]:
    """NVML's compute processes as protocol entries, one per PID, with the name, user,
    command line and container /proc gives for each."""
    out = []
    by_pid = {}
    for p in running:
        pid, used = p.pid, p.usedGpuMemory
        entry = by_pid.get(pid)
        if entry is None:
            entry = by_pid[pid] = {"pid": pid, **_names(pid)}
            out.append(entry)
            if sm and pid in sm:
                entry["sm_util"] = sm[pid]
            if used is not None:
                entry["used_memory"] = used
        elif used is not None:
            entry["used_memory"] = entry.get("used_memory", 0) + used
    return out


def _merge(records: list[dict], extra: list[dict]) -> None:
    """Fold each extra record's metrics into the record of the same device, if any."""
    by_device = {(r["gpu"], r.get("slice")): r for r in records if "m" in r}
    for record in extra:
        target = by_device.get((record["gpu"], record.get("slice")))
        if target is None:
            records.append(record)
        else:
            target["m"].update(record["m"])


class NvmlSource(Source):
    name = "nvml"

    def __init__(
        self,
        *,
        host: str,
        interval: float = 1.0,
        slow_interval: float = 1.0,
        counter_interval: float = 60.0,
        once: bool = False,
        nvml=None,
    ):
        super().__init__()
        self.host = host
        self.interval = interval
        self.slow_interval = slow_interval
        self.counter_interval = counter_interval
        self.once = once
        self.nv = nvml
        self.gpus: list[_Gpu] = []
        self.driver: str | None = None
        self._slow_due = 0.0
        self._mig_due = 0.0
        self._by_handle: dict[int, _Gpu] = {}

    # -- discovery --------------------------------------------------------------

    def open(self) -> None:
        if self.nv is None:
            try:
                self.nv = importlib.import_module("pynvml")
            except ImportError:
                raise NvmlUnavailable(
                    "pynvml is not installed (pip install nvidia-ml-py)"
                ) from None
        nv = self.nv
        self._errors()
        self._reads = self._scalar_reads()
        self._get_util = nv.nvmlDeviceGetUtilizationRates
        self._get_mem = nv.nvmlDeviceGetMemoryInfo
        self._get_procs = nv.nvmlDeviceGetComputeRunningProcesses
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            raise NvmlUnavailable(f"NVML is not available: {exc}") from None
        try:
            self.driver = _text(nv.nvmlSystemGetDriverVersion())
        except nv.NVMLError:
            self.driver = None
        for index in range(count):
            try:
                gpu = self._probe(index)
            except _GpuLost:
                log.error("GPU %d is lost; it is left out", index)
                continue
            if gpu is not None:
                self.gpus.append(gpu)
                self._by_handle[_handle_key(gpu.handle)] = gpu

    def _errors(self) -> None:
        nv = self.nv
        names = ("NotSupported", "FunctionNotFound", "NoPermission", "InvalidArgument")
        self._nvml_error = nv.NVMLError
        self._unsupported = tuple(
            getattr(nv, f"NVMLError_{n}") for n in names if hasattr(nv, f"NVMLError_{n}")
        )
        self._lost_error = nv.NVMLError_GpuIsLost
        self._unknown_error = nv.NVMLError_Unknown
        self._timeout_error = nv.NVMLError_Timeout

    def _probe(self, index: int) -> _Gpu | None:
        nv = self.nv
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            gpu = _Gpu(
                handle=handle,
                uuid=_text(nv.nvmlDeviceGetUUID(handle)),
                index=index,
                name=_text(nv.nvmlDeviceGetName(handle)),
                memory_total=int(nv.nvmlDeviceGetMemoryInfo(handle).total),
                reads=list(self._reads),
            )
        except nv.NVMLError as exc:
            log.error("GPU %d cannot be read (%s); it is left out", index, exc)
            return None
        pci = self._call(gpu, "pci", nv.nvmlDeviceGetPciInfo, handle)
        if pci is not None:
            gpu.pci_bus_id = _text(pci.busId)
        limit = self._call(gpu, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        gpu.power_limit_mw = int(limit) if limit else None
        mig = self._call(gpu, "mig", nv.nvmlDeviceGetMigMode, handle)
        gpu.mig_mode = bool(mig) and mig[0] == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1)
        query = getattr(nv, "nvmlGpmQueryDeviceSupport", None)  # pynvml before 12.525 lacks GPM
        support = self._call(gpu, "gpm", query, handle) if query else None
        gpu.gpm_ok = bool(support is not None and support.isSupportedDevice)
        if gpu.gpm_ok:
            get = nv.nvmlGpmSampleGet
            gpu.gpm_take = lambda sample: get(handle, sample)
        get_mode = getattr(nv, "nvmlDeviceGetVirtualizationMode", None)
        mode = self._call(gpu, "virtualization", get_mode, handle) if get_mode else None
        gpu.virtualization = VIRTUALIZATION.get(mode) if mode is not None else None
        if gpu.mig_mode:
            gpu.slices = self._probe_slices(gpu)
        elif gpu.virtualization == "host_vgpu":
            gpu.slices = self._probe_vgpus(gpu)
        return gpu

    def _probe_vgpus(self, gpu: _Gpu) -> list[_Slice]:
        """The vGPUs running on a GPU of a host in vGPU mode, as slices: "VGPU-<uuid>",
        their type's name as the profile, its framebuffer as memory_total."""
        nv = self.nv
        get_active = getattr(nv, "nvmlDeviceGetActiveVgpus", None)  # absent from old pynvml
        active = (self._call(gpu, "vgpus", get_active, gpu.handle) if get_active else None) or []
        slices = []
        if len(active) > MAX_SLICES:
            log.warning("GPU %d runs %d vGPUs; the protocol carries %d, the rest are left out",
                        gpu.index, len(active), MAX_SLICES)  # fmt: skip
        for i, instance in enumerate(active[:MAX_SLICES]):
            try:
                uuid = _NOT_IN_UUID.sub("", _text(nv.nvmlVgpuInstanceGetUUID(instance)))
                kind = nv.nvmlVgpuInstanceGetType(instance)
                profile = _text(nv.nvmlVgpuTypeGetName(kind)).removeprefix("NVIDIA ").strip()
                memory = int(nv.nvmlVgpuTypeGetFramebufferSize(kind))
            except nv.NVMLError as exc:
                log.warning("vGPU %d of GPU %d cannot be read: %s", i, gpu.index, exc)
                continue
            slices.append(_Slice(handle=None, uuid=f"VGPU-{uuid}"[:96], gpu_instance_id=i,
                                 profile=profile[:32], memory_total=memory, vgpu=instance))  # fmt: skip
        return slices

    def _probe_slices(self, gpu: _Gpu) -> list[_Slice]:
        nv = self.nv
        count = self._call(gpu, "mig_count", nv.nvmlDeviceGetMaxMigDeviceCount, gpu.handle) or 0
        slices = []
        for i in range(count):
            try:
                handle = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, i)
            except nv.NVMLError:
                continue  # no MIG device at this index
            try:
                name = _text(nv.nvmlDeviceGetName(handle))
                match = re.search(r"MIG\s+(\S+)\s*$", name)
                sl = _Slice(
                    handle=handle,
                    uuid=_text(nv.nvmlDeviceGetUUID(handle)),
                    gpu_instance_id=int(nv.nvmlDeviceGetGpuInstanceId(handle)),
                    profile=match.group(1) if match else name,
                    memory_total=int(nv.nvmlDeviceGetMemoryInfo(handle).total),
                    gpm_ok=gpu.gpm_ok,
                )
            except nv.NVMLError as exc:
                log.warning("MIG device %d of GPU %d cannot be read: %s", i, gpu.index, exc)
                continue
            if sl.gpm_ok:
                get, parent, gi = nv.nvmlGpmMigSampleGet, gpu.handle, sl.gpu_instance_id
                sl.gpm_take = lambda sample, get=get, parent=parent, gi=gi: get(parent, gi, sample)
            slices.append(sl)
        return slices

    def rescan_mig(self) -> bool:
        """Re-read each GPU's MIG layout; tell on_inventory when it changed."""
        nv = self.nv
        changed = False
        for gpu in self.gpus:
            if gpu.lost or ("mig" in gpu.unsupported and gpu.virtualization != "host_vgpu"):
                continue
            try:
                mig = self._call(gpu, "mig", nv.nvmlDeviceGetMigMode, gpu.handle)
            except _GpuLost:
                continue
            mig_mode = bool(mig) and mig[0] == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1)
            if mig_mode:
                slices = self._probe_slices(gpu)
            elif gpu.virtualization == "host_vgpu":
                slices = self._probe_vgpus(gpu)
            else:
                slices = []
            if mig_mode == gpu.mig_mode and [s.uuid for s in slices] == [
                s.uuid for s in gpu.slices
            ]:
                continue
            old, gpu.slices, gpu.mig_mode = gpu.slices, slices, mig_mode
            self._free_gpm(old)
            what = "MIG layout" if mig_mode or old and old[0].vgpu is None else "vGPU set"
            log.warning("GPU %d: %s changed (%d slices now)", gpu.index, what, len(slices))
            changed = True
        if changed and self.on_inventory is not None:
            self.on_inventory(self.host, [g.hello() for g in self.gpus])
        return changed

    def hosts(self) -> list[HostInfo]:
        return [HostInfo(self.host, [g.hello() for g in self.gpus], driver=self.driver)]

    # -- calls ------------------------------------------------------------------

    def _failed(self, dev: _Device, key: str, exc: BaseException) -> int:
        """Deal with an NVML error of dev's call `key`: 1 when it was Unknown Error, else 0.

        A lost GPU raises _GpuLost; a call the device does not support is never made again.
        """
        if isinstance(exc, self._lost_error):
            raise _GpuLost from None
        if isinstance(exc, self._unsupported):
            dev.unsupported.add(key)
            if isinstance(dev, _Gpu):
                dev.reads = [r for r in dev.reads if r[0] != key]
            log.debug("%s: %s not supported (%s)", dev.uuid, key, exc)
            return 0
        if isinstance(exc, self._unknown_error):
            return 1
        log.debug("%s: %s failed (%s)", dev.uuid, key, exc)
        return 0

    def _call(self, dev: _Device, key: str, fn, *args):
        """fn(*args), or None when it failed; remembers calls the device does not support."""
        if key in dev.unsupported:
            return None
        try:
            return fn(*args)
        except self._nvml_error as exc:
            self._failed(dev, key, exc)
        return None

    # -- fast path --------------------------------------------------------------

    def sample_fast(self, now: float | None = None) -> list[dict]:
        now = time.time() if now is None else now
        records = []
        for gpu in self.gpus:
            if gpu.lost:
                records.extend(self._probe_back(gpu, now))
                continue
            slices = gpu.slices  # the slow thread may replace the list (MIG rescan)
            try:
                record = self._fast_gpu(gpu, now)
                if slices and slices[0].vgpu is not None:
                    slices = self._fast_vgpus(gpu, slices, now)
                elif slices:
                    slices = [self._fast_slice(gpu, s, now) for s in slices]
            except _GpuLost:
                records.append(self._mark_lost(gpu, now, "GPU is lost"))
                continue
            if record is None:
                records.append(
                    self._mark_lost(gpu, now, "every NVML call failed with Unknown Error")
                )
                continue
            records.append(record)
            if slices:
                records.extend(s for s in slices if s is not None)
        return records

    def _scalar_reads(self) -> list[tuple[str, object, tuple]]:
        """(metric, NVML function, extra arguments) for the one-number fast reads."""
        nv = self.nv
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if reasons is None:
            reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons
        ecc = nv.nvmlDeviceGetTotalEccErrors
        return [
            ("power_mw", nv.nvmlDeviceGetPowerUsage, ()),
            ("temp_c", nv.nvmlDeviceGetTemperature, (nv.NVML_TEMPERATURE_GPU,)),
            ("sm_clock_mhz", nv.nvmlDeviceGetClockInfo, (nv.NVML_CLOCK_SM,)),
            ("mem_clock_mhz", nv.nvmlDeviceGetClockInfo, (nv.NVML_CLOCK_MEM,)),
            ("clocks_event_reasons", reasons, ()),
            (
                "ecc_corrected_volatile",
                ecc,
                (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            ),
            (
                "ecc_uncorrected_volatile",
                ecc,
                (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            ),
            ("fan_pct", nv.nvmlDeviceGetFanSpeed, ()),
        ]

    def _fast_gpu(self, gpu: _Gpu, now: float) -> dict | None:
        """The GPU's fast record, or None when every call failed with Unknown Error.

        The hot path: no per-call helper, no logging, no allocation beyond the record.
        """
        h = gpu.handle
        unsupported = gpu.unsupported
        error = self._nvml_error
        m = {}
        calls = unknown = 0
        if "util" not in unsupported:
            calls += 1
            try:
                util = self._get_util(h)
                m["gpu_util"] = util.gpu
                m["mem_util"] = util.memory
            except error as exc:
                unknown += self._failed(gpu, "util", exc)
        if "mem" not in unsupported:
            calls += 1
            try:
                mem = self._get_mem(h)
                m["mem_used"] = mem.used
                m["mem_total"] = mem.total
            except error as exc:
                unknown += self._failed(gpu, "mem", exc)
        if gpu.power_limit_mw:
            m["power_limit_mw"] = gpu.power_limit_mw
        reads = gpu.reads
        calls += len(reads)
        for metric, fn, args in reads:
            try:
                m[metric] = fn(h, *args)
            except error as exc:
                unknown += self._failed(gpu, metric, exc)
        record = {"t": now, "gpu": gpu.uuid, "m": m}
        if "procs" not in unsupported:
            calls += 1
            try:
                record["procs"] = _proc_list(self._get_procs(h), gpu.proc_sm)
            except error as exc:
                unknown += self._failed(gpu, "procs", exc)
        if unknown and unknown == calls:
            return None
        return record

    def _fast_slice(self, gpu: _Gpu, sl: _Slice, now: float) -> dict | None:
        record = {"t": now, "gpu": gpu.uuid, "slice": sl.uuid}
        mem = self._call(sl, "mem", self._get_mem, sl.handle)
        if mem is not None:
            record["m"] = {"mem_used": mem.used, "mem_total": mem.total}
        running = self._call(sl, "procs", self._get_procs, sl.handle)
        if running is not None:
            record["procs"] = _proc_list(running, {})
        elif mem is None:
            return None
        return record

    def _fast_vgpus(self, gpu: _Gpu, slices: list[_Slice], now: float) -> list[dict]:
        """Each vGPU's framebuffer use, and its SM and memory utilization since the last
        read (one call for all of a GPU's vGPUs). What NVML does not give stays absent."""
        nv = self.nv
        util = {}
        get_util = getattr(nv, "nvmlDeviceGetVgpuUtilization", None)
        samples = (self._call(gpu, "vgpu_util", get_util, gpu.handle, gpu.vgpu_ts) if get_util else None) or []
        for sample in samples:
            if sample.timeStamp > gpu.vgpu_ts:
                util[sample.vgpuInstance] = (sample.smUtil.uiVal, sample.memUtil.uiVal)
        if samples:
            gpu.vgpu_ts = max(gpu.vgpu_ts, *(sample.timeStamp for sample in samples))
        out = []
        for sl in slices:
            m = {"mem_total": sl.memory_total}
            used = self._call(sl, "fb", nv.nvmlVgpuInstanceGetFbUsage, sl.vgpu)
            if used is not None:
                m["mem_used"] = int(used)
            if sl.vgpu in util:
                m["gpu_util"], m["mem_util"] = util[sl.vgpu]
            out.append({"t": now, "gpu": gpu.uuid, "slice": sl.uuid, "m": m})
        return out

    def _mark_lost(self, gpu: _Gpu, now: float, message: str) -> dict:
        gpu.lost = True
        gpu.last_probe = time.monotonic()
        log.error("GPU %d (%s) is lost: %s; still serving the others", gpu.index, gpu.uuid, message)
        return {"t": now, "gpu": gpu.uuid, "event": {"kind": "gpu_lost", "message": message}}

    def _probe_back(self, gpu: _Gpu, now: float) -> list[dict]:
        if time.monotonic() - gpu.last_probe < LOST_PROBE_S:
            return []
        gpu.last_probe = time.monotonic()
        try:
            self.nv.nvmlDeviceGetMemoryInfo(gpu.handle)
        except self.nv.NVMLError:
            return []
        gpu.lost = False
        log.warning("GPU %d (%s) answers again", gpu.index, gpu.uuid)
        return [{"t": now, "gpu": gpu.uuid, "event": {"kind": "gpu_back"}}]

    # -- slow path: GPM and per-process SM use, every slow interval ---------------

    def sample_slow(self, now: float | None = None) -> list[dict]:
        now = time.time() if now is None else now
        records = []
        for gpu in self.gpus:
            if gpu.lost:
                continue
            try:
                records.extend(self._slow_gpu(gpu, now))
            except _GpuLost:
                continue  # the fast path reports it
        return records

    def _slow_gpu(self, gpu: _Gpu, now: float) -> list[dict]:
        records = []
        if not gpu.mig_mode:
            m = self._gpm(gpu, GPM_METRICS)
            if m:
                records.append({"t": now, "gpu": gpu.uuid, "m": m})
        for sl in gpu.slices:
            m = self._gpm(sl, GPM_SLICE_METRICS)
            if m:
                records.append({"t": now, "gpu": gpu.uuid, "slice": sl.uuid, "m": m})
        return records

    def _gpm(self, dev: _Device, metrics: dict) -> dict:
        """GPM metrics between the previous slow tick's sample and a new one.

        Per tick and device this is one nvmlGpmSampleGet and one nvmlGpmMetricsGet for
        all metrics; the two samples and the request are allocated once and reused.
        """
        if not dev.gpm_ok or "gpm" in dev.unsupported:
            return {}
        if dev.gpm_samples is None and not self._gpm_setup(dev, metrics):
            return {}
        previous, current = dev.gpm_samples
        try:
            dev.gpm_take(current)
        except self._nvml_error as exc:
            self._failed(dev, "gpm", exc)
            dev.gpm_primed = False
            return {}
        out = self._gpm_values(dev, previous, current) if dev.gpm_primed else {}
        dev.gpm_samples = (current, previous)
        dev.gpm_primed = True
        return out

    def _gpm_setup(self, dev: _Device, metrics: dict) -> bool:
        nv = self.nv
        samples = []
        try:
            for _ in range(2):
                samples.append(nv.nvmlGpmSampleAlloc())
        except self._nvml_error as exc:
            log.debug("%s: GPM samples cannot be allocated (%s)", dev.uuid, exc)
            self._free_samples(samples)
            dev.gpm_ok = False
            return False
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metrics)
        for i, (const, number) in enumerate(metrics.values()):
            request.metrics[i].metricId = getattr(nv, const, number)
        dev.gpm_samples = tuple(samples)
        dev.gpm_request = request
        dev.gpm_names = tuple(metrics)
        dev.gpm_primed = False
        return True

    def _gpm_values(self, dev: _Device, first, second) -> dict:
        request = dev.gpm_request
        request.sample1 = first
        request.sample2 = second
        try:
            self.nv.nvmlGpmMetricsGet(request)
        except self._nvml_error as exc:
            self._failed(dev, "gpm_metrics", exc)
            return {}
        out = {}
        results = request.metrics
        for i, name in enumerate(dev.gpm_names):
            metric = results[i]
            if metric.nvmlReturn == 0:
                out[name] = round(min(100.0, max(0.0, float(metric.value))), 2)
        return out

    def _read_process_utilization(self, gpu: _Gpu) -> None:
        nv = self.nv
        if "proc_util" in gpu.unsupported:
            return
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(gpu.handle, gpu.proc_ts)
        except self._lost_error:
            raise _GpuLost from None
        except self._unsupported:
            gpu.unsupported.add("proc_util")
            gpu.proc_sm = {}
            return
        except nv.NVMLError:
            gpu.proc_sm = {}  # NotFound: no process ran since the last read
            return
        # The driver keeps one sample per process per short period; average those since
        # the last read, so sm_util covers the whole slow interval.
        fresh = [s for s in samples if s.timeStamp > gpu.proc_ts]
        per_pid: dict[int, list[int]] = {}
        for s in fresh:
            per_pid.setdefault(s.pid, []).append(s.smUtil)
        if fresh:
            gpu.proc_ts = max(s.timeStamp for s in fresh)
        gpu.proc_sm = {pid: round(sum(v) / len(v), 1) for pid, v in per_pid.items()}

    # -- counters: energy, PCIe and NVLink bytes, every counter interval -----------

    def sample_counters(self, now: float | None = None) -> list[dict]:
        now = time.time() if now is None else now
        records = []
        for gpu in self.gpus:
            if gpu.lost:
                continue
            m = {}
            try:
                energy = self._call(
                    gpu, "energy", self.nv.nvmlDeviceGetTotalEnergyConsumption, gpu.handle
                )
                if energy is not None:
                    m["energy_mj"] = energy
                self._read_fields(gpu, m)
                # ~2 ms a call on an H200: per-process SM use, averaged since the last read
                self._read_process_utilization(gpu)
            except _GpuLost:
                continue  # the fast path reports it
            if m:
                records.append({"t": now, "gpu": gpu.uuid, "m": m})
        return records

    def sample_health(self, now: float | None = None) -> list[dict]:
        """A "health" event for each GPU whose health facts changed (monitoring/health.py):
        ECC aggregates, retired pages, row remapping, PCIe link, NVLink links; on the
        counter cadence (tens of microseconds per GPU)."""
        now = time.time() if now is None else now
        records = []
        for gpu in self.gpus:
            if gpu.lost:
                continue
            facts = diagnostics.health_facts(self.nv, gpu.handle)
            if facts and facts != gpu.facts:
                gpu.facts = facts
                records.append({"t": now, "gpu": gpu.uuid, "event": {"kind": "health", "facts": facts}})
        return records

    def _field_request(self, gpu: _Gpu) -> list:
        """(metric, field id, scope, scale) for each counter's current candidate field."""
        wanted = []
        for metric, candidates in FIELD_METRICS.items():
            choice = gpu.fields.setdefault(metric, 0)
            if choice < len(candidates):
                const, number, scope, scale = candidates[choice]
                wanted.append((metric, getattr(self.nv, const, number), scope, scale))
        return wanted

    def _read_fields(self, gpu: _Gpu, m: dict) -> None:
        if "fields" in gpu.unsupported:
            return
        if gpu.field_request is None:
            gpu.field_request = self._field_request(gpu)
        wanted = gpu.field_request
        if not wanted:
            gpu.unsupported.add("fields")
            return
        values = self._call(
            gpu, "fields", self.nv.nvmlDeviceGetFieldValues, gpu.handle,
            [(fid, scope) for _, fid, scope, _ in wanted],
        )  # fmt: skip
        if values is None:
            return
        not_supported = getattr(self.nv, "NVML_ERROR_NOT_SUPPORTED", 3)
        for (metric, _, _, scale), fv in zip(wanted, values, strict=False):
            if fv.nvmlReturn == 0:
                m[metric] = int(_field_value(fv)) * scale
            elif fv.nvmlReturn == not_supported:
                gpu.fields[metric] += 1  # try the next candidate next time
                gpu.field_request = None

    # -- XID events -------------------------------------------------------------

    def watch_xids(self, emit: Emit) -> None:
        nv = self.nv
        try:
            event_set = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            log.warning("XID events are not available: %s", exc)
            return
        registered = 0
        for gpu in self.gpus:
            try:
                nv.nvmlDeviceRegisterEvents(gpu.handle, nv.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except nv.NVMLError as exc:
                log.info("XID events are not available on GPU %d: %s", gpu.index, exc)
        try:
            while registered and not self.stop_event.is_set():
                try:
                    data = nv.nvmlEventSetWait(event_set, EVENT_WAIT_MS)
                except self._timeout_error:
                    continue
                except nv.NVMLError as exc:
                    log.debug("waiting for NVML events failed: %s", exc)
                    self.stop_event.wait(1.0)
                    continue
                record = self.xid_record(data)
                if record is not None:
                    emit(self.host, [record])
        finally:
            try:
                nv.nvmlEventSetFree(event_set)
            except nv.NVMLError:
                pass

    def xid_record(self, data, now: float | None = None) -> dict | None:
        if not data.eventType & self.nv.nvmlEventTypeXidCriticalError:
            return None
        gpu = self._by_handle.get(_handle_key(data.device))
        if gpu is None:
            return None
        code = int(data.eventData)
        record = {
            "t": time.time() if now is None else now,
            "gpu": gpu.uuid,
            "event": {
                "kind": "xid",
                "code": code,
                "message": XID_MESSAGES.get(code, f"Xid {code}"),
            },
        }
        gi = getattr(data, "gpuInstanceId", NO_GPU_INSTANCE)
        for sl in gpu.slices:
            if gi != NO_GPU_INSTANCE and sl.gpu_instance_id == gi:
                record["slice"] = sl.uuid
        return record

    # -- running ----------------------------------------------------------------

    def start(self, emit: Emit, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start sampling. Given the agent's event loop, the sampling tick and the counter
        reads run on it as timers, with no thread: the fast and slow sets take tens of
        microseconds per GPU, the counters a few milliseconds once a minute, and threads of
        their own would cost a wakeup, a hand-over and memory. Without a loop, each has a
        thread. The XID watcher always has its own thread (it blocks in NVML)."""
        host = self.host
        if self.once:

            def once():
                emit(host, self.sample_fast())
                emit(host, self.sample_slow())
                emit(host, self.sample_counters())
                emit(host, self.sample_health())
                self.done.set()

            self.spawn(once, "nvml-once")
            return
        stop = self.stop_event
        self._slow_due = time.monotonic()
        self._mig_due = self._slow_due + MIG_RESCAN_S
        steps = {"nvml-fast": (self.interval, lambda: emit(host, self.sample_tick())),
                 "nvml-counters": (self.counter_interval, lambda: emit(host, self.sample_counters())),
                 "nvml-health": (self.counter_interval, lambda: emit(host, self.sample_health()))}  # fmt: skip
        for name, (interval, step) in steps.items():
            if loop is None:
                self.spawn(lambda interval=interval, step=step: run_every(stop, interval, step), name)
            else:
                self._every_on(loop, interval, step)
        self.spawn(lambda: self.watch_xids(emit), "nvml-xid")

    def _every_on(self, loop: asyncio.AbstractEventLoop, interval: float, step) -> None:
        """step() every interval on loop, on a fixed schedule (missed ticks skipped),
        until stop_event is set (set it on the loop: no step is then under way)."""
        due = [loop.time()]

        def tick() -> None:
            if self.stop_event.is_set():
                return
            step()
            due[0] += interval
            now = loop.time()
            if due[0] < now:
                due[0] = now
            loop.call_at(due[0], tick)

        loop.call_soon(tick)

    def sample_tick(self) -> list[dict]:
        """One tick of the sampling thread: the fast set, and the slow set when it is due
        (a tick early by less than half an interval counts as due: clocks jitter), its
        metrics merged into the same tick's record of each device."""
        records = self.sample_fast()
        now = time.monotonic()
        if now >= self._slow_due - self.interval / 2:
            self._slow_due += self.slow_interval
            if self._slow_due <= now:
                self._slow_due = now + self.slow_interval
            _merge(records, self.sample_slow())
            if now >= self._mig_due:
                self._mig_due = now + MIG_RESCAN_S
                self.rescan_mig()
        return records

    def _free_samples(self, samples) -> None:
        for sample in samples:
            try:
                self.nv.nvmlGpmSampleFree(sample)
            except self.nv.NVMLError:
                pass

    def _free_gpm(self, devices) -> None:
        for dev in devices:
            self._free_samples(dev.gpm_samples or ())
            dev.gpm_samples = None
            dev.gpm_request = None
            dev.gpm_primed = False

    def stop(self) -> None:
        self.stop_event.set()
        waiting = []
        for thread in self.threads:
            thread.join(timeout=XID_JOIN_S if thread.name == "nvml-xid" else 2.0)
            if thread.is_alive():
                waiting.append(thread.name)
        nv = self.nv
        if nv is None:
            return
        if waiting:
            # Still inside an NVML call (the XID wait): shutting NVML down under it is not
            # safe. The thread ends at its next timeout; the process's exit closes NVML.
            log.debug("NVML left open: %s still waiting", ", ".join(waiting))
            return
        self._free_gpm([*self.gpus, *(s for g in self.gpus for s in g.slices)])
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass
