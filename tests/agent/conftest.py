"""A tiny in-process agent server speaking protocol v1, and small helpers."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from http import HTTPStatus
from pathlib import Path
from types import SimpleNamespace

import pytest
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from agent.backends.replay import ReplaySource, Trace
from agent.spool import Spool
from agent.uplink import Backoff, HostLink

TRACE = Path(__file__).resolve().parents[2] / "agent" / "traces" / "h200_mixed.jsonl"
TOKEN = "host-token-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeServer:
    """Stores records by (boot_id, seq), acks each frame, and can misbehave on request."""

    def __init__(self, port: int | None = None, tokens=(TOKEN,)):
        self.port = port or free_port()
        self.tokens = set(tokens)
        self.stored: dict[tuple[str, int], dict] = {}
        self.received: list[tuple[str, int]] = []
        self.hellos: list[dict] = []
        self.close_codes: list[int | None] = []
        self.reject = None  # frame -> (close code, error code) or None
        self.go_away_after = None  # close with 1001 once this many records are stored
        self.refuse_http = None  # an HTTP status to answer the upgrade with
        self.gone_away = asyncio.Event()
        self._going = False
        self._server = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/agent/"

    async def start(self) -> FakeServer:
        self._server = await serve(
            self._handle, "127.0.0.1", self.port, process_request=self._process_request
        )
        return self

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    def run_in_thread(self):
        """Serve from a thread of its own (for tests that call the blocking CLI)."""
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def serve_forever():
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())

        thread = threading.Thread(target=serve_forever, daemon=True)
        thread.start()
        ready.wait(5)

        def stop():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)

        return stop

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.stop()

    def _process_request(self, connection, request):
        if self.refuse_http:
            return connection.respond(HTTPStatus(self.refuse_http), "refused\n")
        return None

    async def _handle(self, ws):
        auth = ws.request.headers.get("Authorization", "")
        hello = json.loads(await ws.recv())
        if auth.removeprefix("Bearer ") not in self.tokens:
            await self._error(ws, 4401, "bad_token", "the token is not valid")
            return
        self.hellos.append(hello)
        await ws.send(json.dumps({"type": "welcome", "v": 1, "host": hello["host"],
                                  "server_time": time.time()}))  # fmt: skip
        try:
            async for text in ws:
                await self._samples(ws, json.loads(text))
        except ConnectionClosed:
            pass
        self.close_codes.append(ws.close_code)

    async def _samples(self, ws, frame: dict) -> None:
        if self._going:
            return  # what arrives after the server decided to go is never processed
        verdict = self.reject(frame) if self.reject else None
        if verdict:
            await self._error(ws, verdict[0], verdict[1], "rejected by the test")
            return
        for record in frame["records"]:
            key = (frame["boot_id"], record["seq"])
            self.received.append(key)
            self.stored.setdefault(key, record)
        await ws.send(json.dumps({"type": "ack", "boot_id": frame["boot_id"],
                                  "seq": frame["records"][-1]["seq"]}))  # fmt: skip
        if self.go_away_after is not None and len(self.stored) >= self.go_away_after:
            self.go_away_after = None
            self._going = True
            self._server.close()  # stop listening and close every connection with 1001
            self.gone_away.set()

    async def _error(self, ws, close_code: int, code: str, message: str) -> None:
        await ws.send(json.dumps({"type": "error", "code": code, "message": message}))
        await ws.close(close_code, code)


@pytest.fixture
def trace() -> Trace:
    if not TRACE.exists():
        pytest.skip(f"recorded trace not found at {TRACE}")
    return Trace.load(TRACE)


@pytest.fixture
def small_trace(tmp_path) -> Path:
    """A 20-sample trace, 0.2 s apart, with slow metrics on every 5th sample."""
    path = tmp_path / "small.jsonl"
    static = {"name": "NVIDIA H200", "uuid": "GPU-00000000-1111-2222-3333-444444444444",
              "memory_total": 150754820096, "power_limit_mw": 700000,
              "pci_bus_id": "00000000:00:06.0", "mig_mode": 0}  # fmt: skip
    lines = [json.dumps({"static": static, "plan": ["idle:4"], "period_s": 0.2})]
    for i in range(20):
        row = {"t": 1000.0 + 0.2 * i, "phase": "idle", "gpu_util": i, "mem_used": 10**9 + i,
               "power_mw": 70000 + i, "processes": [{"pid": 7, "used_memory": 5 * 10**8}]}  # fmt: skip
        if i % 5 == 0:
            row["energy_mj"] = 10**6 + i * 1000
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
async def server():
    async with FakeServer() as running:
        yield running


@pytest.fixture
def server_class():
    return FakeServer


@pytest.fixture
def threaded_server():
    servers = []

    def start(**kw) -> FakeServer:
        server = FakeServer(**kw)
        servers.append(server.run_in_thread())
        return server

    yield start
    for stop in servers:
        stop()


@pytest.fixture
def make_link():
    def make(server_url: str, spool: Spool, source, token: str = TOKEN, **kw) -> HostLink:
        info = source.hosts()[0]
        return HostLink(
            server=server_url,
            host=info.host,
            token=token,
            gpus=info.gpus,
            backend=source.name,
            spool=spool,
            driver=info.driver,
            backoff=Backoff(base_s=0.05, cap_s=0.2),
            **kw,
        )

    return make


@pytest.fixture
def replay():
    def make(path, speed: float = 50.0, host: str = "test-host") -> ReplaySource:
        return ReplaySource(Trace.load(path), host=host, speed=speed, once=True)

    return make


# -- a fake pynvml ---------------------------------------------------------------


class FakeNvmlError(Exception):
    value = 999


def _error(name: str, value: int):
    return type(f"NVMLError_{name}", (FakeNvmlError,), {"value": value})


class FakeDevice:
    """One GPU (or MIG slice). Values can be changed between samples by a test."""

    def __init__(self, index=0, uuid=None, *, name="NVIDIA H200", memory_total=150 * 2**30):
        self.index = index
        self.uuid = uuid or f"GPU-{index:08d}-0000-0000-0000-000000000000"
        self.name = name
        self.memory_total = memory_total
        self.values = {
            "util": (87, 31), "mem_used": 40 * 2**30, "power": 612_345, "power_limit": 700_000,
            "temp": 61, "sm_clock": 1980, "mem_clock": 3201, "reasons": 4, "ecc": (2, 0),
            "fan": 40, "energy": 123_456_789,
        }  # fmt: skip
        self.fields = {197: 1_000, 198: 2_000, 138: 30, 139: 40}
        self.gpm = {3: 41.5, 5: 66.25, 10: 38.0, 1: 97.0}
        self.gpm_supported = True
        self.unsupported: set[str] = set()
        self.lost = False
        self.unknown = False
        self.procs = [(4242, 30 * 2**30)]
        self.proc_util = [(4242, 1_000, 55)]
        self.mig_slices: list[FakeDevice] = []
        self.gpu_instance_id = None
        self.calls: dict[str, int] = {}
        self.virtualization = 0  # NVML_GPU_VIRTUALIZATION_MODE_NONE
        self.vgpus: list[SimpleNamespace] = []  # on a host in vGPU mode (3)
        self.vgpu_util: dict[int, tuple[int, int, int]] = {}  # instance -> (time, sm %, memory %)

    def add_vgpu(self, instance: int, uuid: str, type_name: str, framebuffer: int, used: int):
        self.virtualization = 3
        self.vgpus.append(SimpleNamespace(instance=instance, uuid=uuid, type=100 + instance,
                                          name=type_name, fb=framebuffer, used=used))  # fmt: skip

    def add_slice(self, gi: int, profile: str, memory_total: int) -> FakeDevice:
        mig = FakeDevice(self.index, f"MIG-{self.index:04d}{gi:04d}-0000-0000-0000-000000000000",
                         name=f"{self.name} MIG {profile}", memory_total=memory_total)  # fmt: skip
        mig.gpu_instance_id = gi
        mig.values["mem_used"] = memory_total // 4
        mig.unsupported = {"util", "power", "temp", "sm_clock", "mem_clock", "reasons"}
        mig.gpm = {1: 12.5 * gi, 3: 20.0, 5: 5.0 * gi, 10: 9.0}
        self.mig_slices.append(mig)
        return mig


class FakePynvml:
    """Just enough of pynvml's API for the nvml backend, over FakeDevice objects."""

    NVMLError = FakeNvmlError
    NVMLError_NotSupported = _error("NotSupported", 3)
    NVMLError_NoPermission = _error("NoPermission", 4)
    NVMLError_NotFound = _error("NotFound", 6)
    NVMLError_Timeout = _error("Timeout", 10)
    NVMLError_FunctionNotFound = _error("FunctionNotFound", 13)
    NVMLError_GpuIsLost = _error("GpuIsLost", 15)
    NVMLError_Unknown = _error("Unknown", 999)
    NVMLError_InvalidArgument = _error("InvalidArgument", 2)
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPM_METRICS_GET_VERSION = 1
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, devices: list[FakeDevice]):
        self.devices = devices
        self.events: list[tuple[FakeDevice, int, int]] = []
        self.registered: list[FakeDevice] = []
        self.initialized = False

    # helpers
    def _use(self, dev: FakeDevice, what: str):
        dev.calls[what] = dev.calls.get(what, 0) + 1
        if dev.lost:
            raise self.NVMLError_GpuIsLost()
        if dev.unknown:
            raise self.NVMLError_Unknown()
        if what in dev.unsupported:
            raise self.NVMLError_NotSupported()
        return dev.values

    def calls(self, dev: FakeDevice, what: str) -> int:
        return dev.calls.get(what, 0)

    # library
    def nvmlInit(self):
        self.initialized = True

    def nvmlShutdown(self):
        self.initialized = False

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.devices[i]

    def nvmlDeviceGetUUID(self, dev):
        self._use(dev, "uuid")
        return dev.uuid

    def nvmlDeviceGetName(self, dev):
        self._use(dev, "name")
        return dev.name

    def nvmlDeviceGetPciInfo(self, dev):
        self._use(dev, "pci")
        return SimpleNamespace(busId=f"00000000:{dev.index + 0x18:02X}:00.0".encode())

    def nvmlDeviceGetEnforcedPowerLimit(self, dev):
        return self._use(dev, "power_limit")["power_limit"]

    def nvmlDeviceGetMigMode(self, dev):
        self._use(dev, "mig")
        return [1 if dev.mig_slices else 0, 0]

    # virtualization
    def nvmlDeviceGetVirtualizationMode(self, dev):
        self._use(dev, "virtualization")
        return dev.virtualization

    def _vgpu(self, instance: int) -> SimpleNamespace:
        for dev in self.devices:
            for v in dev.vgpus:
                if instance in (v.instance, v.type):
                    return v
        raise self.NVMLError_NotFound()

    def nvmlDeviceGetActiveVgpus(self, dev):
        self._use(dev, "vgpus")
        return [v.instance for v in dev.vgpus]

    def nvmlVgpuInstanceGetUUID(self, instance):
        return self._vgpu(instance).uuid

    def nvmlVgpuInstanceGetType(self, instance):
        return self._vgpu(instance).type

    def nvmlVgpuTypeGetName(self, kind):
        return self._vgpu(kind).name.encode()

    def nvmlVgpuTypeGetFramebufferSize(self, kind):
        return self._vgpu(kind).fb

    def nvmlVgpuInstanceGetFbUsage(self, instance):
        return self._vgpu(instance).used

    def nvmlDeviceGetVgpuUtilization(self, dev, since):
        self._use(dev, "vgpu_util")
        return [SimpleNamespace(vgpuInstance=i, timeStamp=t, smUtil=SimpleNamespace(uiVal=sm),
                                memUtil=SimpleNamespace(uiVal=mem))
                for i, (t, sm, mem) in dev.vgpu_util.items()]  # fmt: skip

    def nvmlDeviceGetMaxMigDeviceCount(self, dev):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, dev, i):
        if i >= len(dev.mig_slices):
            raise self.NVMLError_NotFound()
        return dev.mig_slices[i]

    def nvmlDeviceGetGpuInstanceId(self, dev):
        return dev.gpu_instance_id

    def nvmlDeviceGetMemoryInfo(self, dev):
        v = self._use(dev, "mem")
        return SimpleNamespace(total=dev.memory_total, used=v["mem_used"],
                               free=dev.memory_total - v["mem_used"])  # fmt: skip

    def nvmlDeviceGetUtilizationRates(self, dev):
        gpu, memory = self._use(dev, "util")["util"]
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetPowerUsage(self, dev):
        return self._use(dev, "power")["power"]

    def nvmlDeviceGetTemperature(self, dev, sensor):
        return self._use(dev, "temp")["temp"]

    def nvmlDeviceGetClockInfo(self, dev, which):
        key = "sm_clock" if which == self.NVML_CLOCK_SM else "mem_clock"
        return self._use(dev, key)[key]

    def nvmlDeviceGetCurrentClocksEventReasons(self, dev):
        return self._use(dev, "reasons")["reasons"]

    def nvmlDeviceGetTotalEccErrors(self, dev, kind, counter):
        return self._use(dev, "ecc")["ecc"][kind]

    def nvmlDeviceGetFanSpeed(self, dev):
        return self._use(dev, "fan")["fan"]

    def nvmlDeviceGetComputeRunningProcesses(self, dev):
        self._use(dev, "procs")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in dev.procs]

    def nvmlDeviceGetTotalEnergyConsumption(self, dev):
        return self._use(dev, "energy")["energy"]

    def nvmlDeviceGetFieldValues(self, dev, requests):
        self._use(dev, "fields")
        out = []
        for field_id, scope in requests:
            ok = field_id in dev.fields
            value = SimpleNamespace(ullVal=dev.fields.get(field_id, 0))
            out.append(SimpleNamespace(fieldId=field_id, scopeId=scope, valueType=3,
                                       nvmlReturn=0 if ok else 3, value=value))  # fmt: skip
        return out

    def nvmlDeviceGetProcessUtilization(self, dev, since):
        self._use(dev, "proc_util")
        if not dev.proc_util:
            raise self.NVMLError_NotFound()
        return [SimpleNamespace(pid=p, timeStamp=ts, smUtil=sm) for p, ts, sm in dev.proc_util
                if ts > since]  # fmt: skip

    # GPM
    def nvmlGpmQueryDeviceSupport(self, dev):
        return SimpleNamespace(isSupportedDevice=int(dev.gpm_supported))

    def nvmlGpmSampleAlloc(self):
        return SimpleNamespace(device=None)

    def nvmlGpmSampleFree(self, sample):
        pass

    def nvmlGpmSampleGet(self, dev, sample):
        self._use(dev, "gpm_sample")
        sample.device = dev
        return sample

    def nvmlGpmMigSampleGet(self, dev, gi, sample):
        self._use(dev, "gpm_mig_sample")
        sample.device = next(s for s in dev.mig_slices if s.gpu_instance_id == gi)
        return sample

    class c_nvmlGpmMetricsGet_t:  # noqa: N801 (pynvml's name)
        def __init__(self):
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]

    def nvmlGpmMetricsGet(self, request):
        dev = request.sample2.device
        for metric in request.metrics[: request.numMetrics]:
            if metric.metricId in dev.gpm:
                metric.value, metric.nvmlReturn = dev.gpm[metric.metricId], 0
            else:
                metric.nvmlReturn = 3
        return request

    # events
    def nvmlEventSetCreate(self):
        return object()

    def nvmlDeviceRegisterEvents(self, dev, types, event_set):
        self.registered.append(dev)

    def nvmlEventSetWait(self, event_set, timeout_ms):
        if not self.events:
            time.sleep(min(timeout_ms, 20) / 1000)
            raise self.NVMLError_Timeout()
        dev, code, gi = self.events.pop(0)
        return SimpleNamespace(device=dev, eventType=0x8, eventData=code, gpuInstanceId=gi)

    def nvmlEventSetFree(self, event_set):
        pass


@pytest.fixture
def fake_nvml(monkeypatch, tmp_path):
    """Install a fake pynvml with the given devices (two plain H200s by default). Process
    names come from an empty fake /proc (tmp_path/proc), so the host's PIDs never leak in."""
    from agent.backends import nvml
    from agent.procinfo import ProcessNames

    (tmp_path / "proc").mkdir()
    monkeypatch.setattr(nvml, "_names", ProcessNames(tmp_path / "proc"))

    def install(devices=None) -> FakePynvml:
        fake = FakePynvml(devices if devices is not None else [FakeDevice(0), FakeDevice(1)])
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install


@pytest.fixture
def fake_device():
    return FakeDevice
