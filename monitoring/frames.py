"""Validation of agent frames (protocol v1, docs/agent-protocol.md). Pure: no database.

A frame is accepted whole or refused whole: ``FrameError`` carries the close code,
a short machine code and a message that names the offending field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from monitoring.agent import protocol as p

MAX_GPUS = 64
MAX_SLICES = 64
MAX_METRICS = 64
MAX_NAME = 80
EARLIEST_T = 946_684_800.0  # 2000-01-01
FUTURE_SLACK_S = 300.0


class FrameError(Exception):
    def __init__(self, close_code: int, code: str, message: str):
        super().__init__(message)
        self.close_code = close_code
        self.code = code
        self.message = message


def bad(message: str, code: str = "bad_frame") -> FrameError:
    return FrameError(p.CLOSE_BAD_FRAME, code, message)


def _no_constants(name: str):
    raise bad(f"{name} is not allowed in a frame (numbers must be finite)", "not_finite")


def parse(text, *, max_bytes: int = p.MAX_FRAME_BYTES) -> dict:
    if not isinstance(text, str):
        raise bad("frames are JSON text, not binary", "binary_frame")
    if len(text) > max_bytes:
        raise FrameError(p.CLOSE_TOO_LARGE, "too_large", f"frame of {len(text)} bytes exceeds {max_bytes}")
    try:
        frame = json.loads(text, parse_constant=_no_constants)
    except FrameError:
        raise
    except ValueError as exc:
        raise bad(f"frame is not valid JSON ({exc.msg} at {exc.pos})", "bad_json") from None
    if not isinstance(frame, dict):
        raise bad("frame must be a JSON object")
    if frame.get("v") != p.VERSION:
        raise FrameError(p.CLOSE_VERSION, "version", f"v must be {p.VERSION}, not {frame.get('v')!r}")
    return frame


# --- small checks -------------------------------------------------------------------


def _int(value, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"{where} must be an integer")
    if not low <= value <= high:
        raise bad(f"{where}={value} is out of range {low}..{high}", "out_of_range")
    return value


def _str(value, where: str, max_len: int = MAX_NAME, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise bad(f"{where} must be a non-empty string")
    if len(value) > max_len:
        raise bad(f"{where} is longer than {max_len} characters")
    if any(ord(c) < 32 for c in value):
        raise bad(f"{where} contains control characters")
    return value


def _list(value, where: str, max_len: int) -> list:
    if not isinstance(value, list):
        raise bad(f"{where} must be a list")
    if len(value) > max_len:
        raise FrameError(p.CLOSE_TOO_LARGE, "too_large", f"{where} has {len(value)} entries, more than {max_len}")
    return value


def _dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise bad(f"{where} must be an object")
    return value


def number(value, where: str, low: float, high: float, integral: bool):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(f"{where} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise bad(f"{where} must be finite", "not_finite")
    if integral and isinstance(value, float):
        if not value.is_integer():
            raise bad(f"{where}={value} must be a whole number")
        value = int(value)
    if not low <= value <= high:
        raise bad(f"{where}={value} is out of range {low:g}..{high:g}", "out_of_range")
    return value


# --- hello --------------------------------------------------------------------------


@dataclass(frozen=True)
class SliceInfo:
    uuid: str
    gpu_instance_id: int
    profile: str
    memory_total: int | None


@dataclass(frozen=True)
class GpuInfo:
    uuid: str
    index: int
    name: str
    memory_total: int
    mig_mode: bool = False
    pci_bus_id: str = ""
    power_limit_mw: int | None = None
    slices: tuple[SliceInfo, ...] = ()


@dataclass(frozen=True)
class Hello:
    host: str
    boot_id: str
    agent: str
    backend: str
    gpus: tuple[GpuInfo, ...]

    @property
    def devices(self) -> dict[str, tuple[str, str | None]]:
        """{uuid: (gpu uuid, slice uuid or None)} of every GPU and slice reported."""
        out = {}
        for gpu in self.gpus:
            out[gpu.uuid] = (gpu.uuid, None)
            for s in gpu.slices:
                out[s.uuid] = (gpu.uuid, s.uuid)
        return out


def hello(frame: dict) -> Hello:
    if frame.get("type") != "hello":
        raise FrameError(p.CLOSE_HELLO_TIMEOUT, "hello_first", "the first frame must be a hello")
    host = _str(frame.get("host"), "host", 253)
    if not p.HOST_RE.match(host):
        raise bad("host must be letters, digits, '.', '_' or '-'")
    boot_id = frame.get("boot_id")
    if not isinstance(boot_id, str) or not p.BOOT_ID_RE.match(boot_id):
        raise bad("boot_id must be 32 lowercase hex digits")
    agent = _str(frame.get("agent", ""), "agent", empty=True)
    backend = _str(frame.get("backend", ""), "backend", 20, empty=True)
    raw_gpus = _list(frame.get("gpus"), "gpus", MAX_GPUS)
    gpus, seen = [], set()
    for i, entry in enumerate(raw_gpus):
        gpu = _gpu(_dict(entry, f"gpus[{i}]"), f"gpus[{i}]")
        for uuid in (gpu.uuid, *(s.uuid for s in gpu.slices)):
            if uuid in seen:
                raise bad(f"gpus[{i}]: UUID {uuid} is reported twice")
            seen.add(uuid)
        gpus.append(gpu)
    return Hello(host=host, boot_id=boot_id, agent=agent, backend=backend, gpus=tuple(gpus))


def _gpu(entry: dict, where: str) -> GpuInfo:
    slices = []
    for j, s in enumerate(_list(entry.get("slices", []), f"{where}.slices", MAX_SLICES)):
        s = _dict(s, f"{where}.slices[{j}]")
        memory = s.get("memory_total")
        slices.append(
            SliceInfo(
                uuid=_str(s.get("uuid"), f"{where}.slices[{j}].uuid"),
                gpu_instance_id=_int(s.get("gpu_instance_id", 0), f"{where}.slices[{j}].gpu_instance_id", 0, 65535),
                profile=_str(s.get("profile", ""), f"{where}.slices[{j}].profile", 40, empty=True),
                memory_total=None if memory is None else _int(memory, f"{where}.slices[{j}].memory_total", 0, p.SAFE_INT),
            )
        )
    limit = entry.get("power_limit_mw")
    mig = entry.get("mig_mode", False)
    if not isinstance(mig, bool):
        raise bad(f"{where}.mig_mode must be true or false")
    return GpuInfo(
        uuid=_str(entry.get("uuid"), f"{where}.uuid"),
        index=_int(entry.get("index"), f"{where}.index", 0, 255),
        name=_str(entry.get("name", ""), f"{where}.name", empty=True),
        memory_total=_int(entry.get("memory_total", 0), f"{where}.memory_total", 0, p.SAFE_INT),
        mig_mode=mig,
        pci_bus_id=_str(entry.get("pci_bus_id", ""), f"{where}.pci_bus_id", 32, empty=True),
        power_limit_mw=None if limit is None else _int(limit, f"{where}.power_limit_mw", 0, 10_000_000),
        slices=tuple(slices),
    )


# --- samples ------------------------------------------------------------------------


@dataclass
class Record:
    seq: int
    t: float
    device: str  # the slice's UUID for a slice, else the GPU's
    gpu: str
    slice: str | None
    m: dict = field(default_factory=dict)
    procs: list | None = None
    event: dict | None = None


@dataclass
class Samples:
    boot_id: str
    records: list[Record]

    @property
    def first_seq(self) -> int:
        return self.records[0].seq

    @property
    def last_seq(self) -> int:
        return self.records[-1].seq


def samples(frame: dict, hello_: Hello, *, now: float, after_seq: int = 0) -> Samples:
    """A checked samples frame. ``after_seq``: the last seq this connection saw for the
    frame's boot_id; seqs must climb past it and within the frame."""
    if frame.get("type") != "samples":
        raise bad(f"unknown frame type {frame.get('type')!r} (expected samples)", "bad_type")
    boot_id = frame.get("boot_id")
    if not isinstance(boot_id, str) or not p.BOOT_ID_RE.match(boot_id):
        raise bad("boot_id must be 32 lowercase hex digits")
    raw = _list(frame.get("records"), "records", p.MAX_RECORDS_PER_FRAME)
    if not raw:
        raise bad("records is empty")
    devices = hello_.devices
    records = []
    previous = after_seq
    for i, entry in enumerate(raw):
        record = _record(_dict(entry, f"records[{i}]"), f"records[{i}]", devices, now)
        if record.seq <= previous:
            raise FrameError(
                p.CLOSE_SEQ, "seq_order",
                f"records[{i}].seq={record.seq} does not follow {previous} (seqs must increase)",
            )
        previous = record.seq
        records.append(record)
    return Samples(boot_id=boot_id, records=records)


def _record(entry: dict, where: str, devices: dict, now: float) -> Record:
    seq = _int(entry.get("seq"), f"{where}.seq", 1, p.SAFE_INT)
    t = number(entry.get("t"), f"{where}.t", EARLIEST_T, now + FUTURE_SLACK_S, False)
    gpu = _str(entry.get("gpu"), f"{where}.gpu")
    piece = entry.get("slice")
    device = gpu if piece is None else _str(piece, f"{where}.slice")
    known = devices.get(device)
    if known is None or known[0] != gpu:
        what = f"slice {device} of GPU {gpu}" if piece is not None else f"GPU {gpu}"
        raise bad(f"{where}: {what} is not in this host's hello", "unknown_gpu")
    record = Record(seq=seq, t=float(t), device=device, gpu=gpu, slice=piece)
    if "event" in entry:
        if "m" in entry or "procs" in entry:
            raise bad(f"{where}: an event record carries no metrics")
        record.event = _event(_dict(entry["event"], f"{where}.event"), f"{where}.event")
        return record
    if "m" not in entry and "procs" not in entry:
        raise bad(f"{where} has neither m, procs nor event")
    m = _dict(entry.get("m", {}), f"{where}.m")
    if len(m) > MAX_METRICS:
        raise FrameError(p.CLOSE_TOO_LARGE, "too_large", f"{where}.m has more than {MAX_METRICS} metrics")
    for name, value in m.items():
        bounds = p.METRICS.get(name)
        if bounds is None:
            # v1: unknown metrics are ignored, but they must still be finite numbers.
            number(value, f"{where}.m.{name[:40]}", -math.inf, math.inf, False)
            continue
        record.m[name] = number(value, f"{where}.m.{name}", *bounds)
    if "procs" in entry:
        record.procs = [_proc(_dict(x, f"{where}.procs[{k}]"), f"{where}.procs[{k}]")
                        for k, x in enumerate(_list(entry["procs"], f"{where}.procs", p.MAX_PROCS))]
    return record


def _proc(entry: dict, where: str) -> dict:
    out = {"pid": _int(entry.get("pid"), f"{where}.pid", 0, 2**32 - 1)}
    if "used_memory" in entry:
        out["used_memory"] = _int(entry["used_memory"], f"{where}.used_memory", 0, p.SAFE_INT)
    if "sm_util" in entry:
        out["sm_util"] = number(entry["sm_util"], f"{where}.sm_util", 0, 100, False)
    return out


def _event(entry: dict, where: str) -> dict:
    kind = entry.get("kind")
    if kind not in p.EVENT_KINDS:
        raise bad(f"{where}.kind must be one of {', '.join(p.EVENT_KINDS)}")
    out = {"kind": kind, "message": ""}
    if "code" in entry:
        out["code"] = _int(entry["code"], f"{where}.code", 0, 2**31 - 1)
    elif kind == "xid":
        raise bad(f"{where}.code is required for an xid event")
    if "message" in entry:
        out["message"] = _str(entry["message"], f"{where}.message", p.MAX_MESSAGE, empty=True)
    return out
