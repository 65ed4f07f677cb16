"""Validation of agent frames, protocol v1 (docs/agent-protocol.md). Pure: no database.

A frame is accepted whole or refused whole: ``FrameError`` carries the close code,
the error slug of section 6 and one sentence naming the offending field. Extra keys
are ignored; missing required keys and wrong types are bad frames.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from console import jsonlimits
from monitoring.agent import protocol as p

MAX_HELLO_BYTES = 64 * 1024
MAX_GPUS = 64
MAX_SLICES = 8
MAX_METRICS = 64
EARLIEST_T = 946_684_800.0  # 2000-01-01
FUTURE_SLACK_S = 86_400.0
GPU_UUID = re.compile(r"^GPU-[A-Za-z0-9-]{0,92}$")
MIG_UUID = re.compile(r"^(MIG|VGPU)-[A-Za-z0-9/-]{0,91}$")  # a MIG slice or a vGPU
METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class FrameError(Exception):
    def __init__(self, close_code: int, code: str, message: str, *, boot_id: str | None = None,
                 seq: int | None = None):
        super().__init__(message)
        self.close_code = close_code
        self.code = code
        self.message = message[: p.MAX_MESSAGE]
        self.boot_id = boot_id
        self.seq = seq

    def frame(self) -> dict:
        out = {"type": "error", "code": self.code, "message": self.message}
        if self.boot_id is not None:
            out["boot_id"] = self.boot_id
        if self.seq is not None:
            out["seq"] = self.seq
        return out


def bad(message: str, code: str = "bad_field") -> FrameError:
    return FrameError(p.CLOSE_BAD_FRAME, code, message)


def _no_constants(name: str):
    raise bad(f"{name} is not a number JSON allows (numbers must be finite)")


def parse(text, *, hello_expected: bool = False) -> dict:
    """The frame as a dict; size, JSON and version checked."""
    if not isinstance(text, str):
        raise bad("binary frames are not allowed; send JSON text", "bad_frame")
    limit = MAX_HELLO_BYTES if hello_expected else p.MAX_FRAME_BYTES
    if len(text) > limit:
        what = "a hello" if hello_expected else "a frame"
        raise FrameError(p.CLOSE_TOO_LARGE, "frame_too_large", f"{what} of {len(text)} bytes exceeds {limit}")
    try:
        frame = jsonlimits.loads(text, max_bytes=limit, parse_constant=_no_constants)
    except jsonlimits.JsonRefused as exc:
        raise bad(f"the frame is {exc.message}" if exc.code == "bad_json" else exc.message, "bad_json") from None
    if not isinstance(frame, dict):
        raise bad("a frame must be a JSON object", "bad_json")
    if not isinstance(frame.get("type"), str):
        raise bad("type is missing or not a string", "bad_frame")
    if frame.get("v") != p.VERSION or isinstance(frame.get("v"), bool):
        raise FrameError(p.CLOSE_VERSION, "unsupported_version", f"v must be {p.VERSION}, not {frame.get('v')!r}")
    return frame


# --- small checks -------------------------------------------------------------------


def _required(obj: dict, key: str, where: str):
    if key not in obj:
        raise bad(f"{where}{key} is required")
    return obj[key]


def _int(value, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad(f"{where} must be an integer between {low} and {high}")
    return value


def _str(value, where: str, max_len: int, *, min_len: int = 1, pattern: re.Pattern | None = None) -> str:
    if not isinstance(value, str) or not min_len <= len(value) <= max_len:
        raise bad(f"{where} must be a string of {min_len} to {max_len} characters")
    if pattern is not None and not pattern.match(value):
        raise bad(f"{where} {value[:100]!r} is not well formed")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise bad(f"{where} contains control characters")
    return value


def _list(value, where: str, max_len: int) -> list:
    if not isinstance(value, list):
        raise bad(f"{where} must be a list")
    if len(value) > max_len:
        raise bad(f"{where} has {len(value)} entries; at most {max_len} are allowed")
    return value


def _dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise bad(f"{where} must be an object")
    return value


def number(value, where: str, low: float, high: float, integral: bool):
    """A JSON number in range; ``integral`` ones must be written without a fraction."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(f"{where} must be a number between {low:g} and {high:g}")
    if isinstance(value, float) and not math.isfinite(value):
        raise bad(f"{where} must be finite")
    if integral and not isinstance(value, int):
        raise bad(f"{where} must be an integer between {low:g} and {high:g}")
    if not low <= value <= high:
        kind = "an integer" if integral else "a number"
        raise bad(f"{where} must be {kind} between {low:g} and {high:g}")
    return value


# --- hello --------------------------------------------------------------------------


@dataclass(frozen=True)
class SliceInfo:
    uuid: str
    gpu_instance_id: int
    profile: str
    memory_total: int


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
    driver: str = ""

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
    if frame["type"] != "hello":
        raise FrameError(p.CLOSE_HELLO_TIMEOUT, "hello_required", f"the first frame must be a hello, not {frame['type'][:40]!r}")
    host = _str(_required(frame, "host", ""), "host", 253, pattern=p.HOST_RE)
    boot_id = _str(_required(frame, "boot_id", ""), "boot_id", 32, pattern=p.BOOT_ID_RE)
    agent = _str(_required(frame, "agent", ""), "agent", 64, min_len=0)
    backend = _str(_required(frame, "backend", ""), "backend", 32)
    driver = _str(frame.get("driver", ""), "driver", 32, min_len=0)
    raw_gpus = _list(_required(frame, "gpus", ""), "gpus", MAX_GPUS)
    gpus, uuids, indexes = [], set(), set()
    for i, entry in enumerate(raw_gpus):
        gpu = _gpu(_dict(entry, f"gpus[{i}]"), f"gpus[{i}]")
        if gpu.index in indexes:
            raise bad(f"gpus[{i}].index {gpu.index} is reported twice")
        indexes.add(gpu.index)
        for uuid in (gpu.uuid, *(s.uuid for s in gpu.slices)):
            if uuid in uuids:
                raise bad(f"gpus[{i}]: UUID {uuid} is reported twice")
            uuids.add(uuid)
        gpus.append(gpu)
    return Hello(host=host, boot_id=boot_id, agent=agent, backend=backend, gpus=tuple(gpus), driver=driver)


def _gpu(entry: dict, where: str) -> GpuInfo:
    slices = []
    for j, s in enumerate(_list(_required(entry, "slices", f"{where}."), f"{where}.slices", MAX_SLICES)):
        at = f"{where}.slices[{j}]"
        s = _dict(s, at)
        slices.append(SliceInfo(
            uuid=_str(_required(s, "uuid", f"{at}."), f"{at}.uuid", 96, min_len=4, pattern=MIG_UUID),
            gpu_instance_id=_int(_required(s, "gpu_instance_id", f"{at}."), f"{at}.gpu_instance_id", 0, 63),
            profile=_str(_required(s, "profile", f"{at}."), f"{at}.profile", 32, min_len=0),
            memory_total=_int(_required(s, "memory_total", f"{at}."), f"{at}.memory_total", 1, p.SAFE_INT),
        ))
    mig = _required(entry, "mig_mode", f"{where}.")
    if not isinstance(mig, bool):
        raise bad(f"{where}.mig_mode must be true or false")
    limit = entry.get("power_limit_mw")
    return GpuInfo(
        uuid=_str(_required(entry, "uuid", f"{where}."), f"{where}.uuid", 96, min_len=4, pattern=GPU_UUID),
        index=_int(_required(entry, "index", f"{where}."), f"{where}.index", 0, 63),
        name=_str(_required(entry, "name", f"{where}."), f"{where}.name", 96),
        memory_total=_int(_required(entry, "memory_total", f"{where}."), f"{where}.memory_total", 1, p.SAFE_INT),
        mig_mode=mig,
        pci_bus_id=_str(entry.get("pci_bus_id", ""), f"{where}.pci_bus_id", 32, min_len=0),
        power_limit_mw=None if limit is None else _int(limit, f"{where}.power_limit_mw", 1, 10_000_000),
        slices=tuple(slices),
    )


# --- samples ------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    seq: int
    t: float
    gpu: str
    slice: str | None
    m: dict = field(default_factory=dict)
    procs: list | None = None
    event: dict | None = None

    @property
    def device(self) -> str:
        """The slice's UUID for a slice record, else the GPU's."""
        return self.slice or self.gpu


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


def samples(frame: dict, *, now: float, known: set | None = None) -> Samples:
    """A checked samples frame. Whether its GPUs belong to the host is the ingest's
    business: unknown ones are acknowledged and discarded (section 3.2).

    ``known`` holds UUID strings already found well formed (per connection), so each
    is checked once rather than once per record.
    """
    kind = frame["type"]
    if kind == "hello":
        raise bad("hello was already sent on this connection", "unexpected_hello")
    if kind != "samples":
        raise bad(f"unknown frame type {kind[:40]!r}", "unknown_type")
    boot_id = _str(_required(frame, "boot_id", ""), "boot_id", 32, pattern=p.BOOT_ID_RE)
    raw = _list(_required(frame, "records", ""), "records", p.MAX_RECORDS_PER_FRAME)
    if not raw:
        raise bad("records must hold 1 to 500 records")
    known = set() if known is None else known
    latest = now + FUTURE_SLACK_S
    records = []
    previous = 0
    try:
        for i, entry in enumerate(raw):
            if type(entry) is not dict:
                raise bad(f"records[{i}] must be an object")
            record = _record(entry, i, latest, known)
            if record.seq <= previous:
                raise FrameError(
                    p.CLOSE_SEQ, "seq_not_increasing",
                    f"records[{i}].seq {record.seq} does not follow {previous}: seqs must increase within a frame",
                )
            previous = record.seq
            records.append(record)
    except FrameError as exc:
        exc.boot_id = boot_id
        first = raw[0].get("seq") if isinstance(raw[0], dict) else None
        exc.seq = first if type(first) is int else None
        raise
    return Samples(boot_id=boot_id, records=records)


# The checks below take a fast path for good values; on anything else they call the
# general checks above, which raise with a message naming the field.


def _record(entry: dict, i: int, latest: float, known: set) -> Record:
    seq = entry.get("seq")
    if type(seq) is not int or not 1 <= seq <= p.SAFE_INT:
        _int(_required(entry, "seq", f"records[{i}]."), f"records[{i}].seq", 1, p.SAFE_INT)
    t = entry.get("t")
    if not ((type(t) is float or type(t) is int) and EARLIEST_T <= t <= latest):
        number(_required(entry, "t", f"records[{i}]."), f"records[{i}].t", EARLIEST_T, latest, False)
        raise bad(f"records[{i}].t is out of range")
    gpu = _uuid(entry.get("gpu"), entry, "gpu", i, GPU_UUID, known)
    piece = entry.get("slice")
    if piece is not None:
        piece = _uuid(piece, entry, "slice", i, MIG_UUID, known)
    record = Record(seq=seq, t=float(t), gpu=gpu, slice=piece)
    has_m = "m" in entry
    if "event" in entry:
        if has_m or "procs" in entry:
            raise bad(f"records[{i}] has both an event and metrics", "bad_frame")
        where = f"records[{i}].event"
        record.event = _event(_dict(entry["event"], where), where)
        return record
    if has_m:
        record.m = _metrics(entry["m"], i)
    elif "procs" not in entry:
        raise bad(f"records[{i}] has neither m, procs nor event", "bad_frame")
    if "procs" in entry:
        record.procs = _procs(entry["procs"], i)
    return record


def _uuid(value, entry: dict, key: str, i: int, pattern: re.Pattern, known: set) -> str:
    if type(value) is str and value in known:
        return value
    where = f"records[{i}].{key}"
    value = _str(_required(entry, key, f"records[{i}]."), where, 96, min_len=4, pattern=pattern)
    known.add(value)
    return value


def _metrics(m, i: int) -> dict:
    if type(m) is not dict:
        raise bad(f"records[{i}].m must be an object")
    if len(m) > MAX_METRICS:
        raise bad(f"records[{i}].m has {len(m)} metrics; at most {MAX_METRICS} are allowed")
    ranges = p.METRICS
    unknown = False
    for name, value in m.items():
        bounds = ranges.get(name)
        if bounds is None:
            if type(name) is not str or not METRIC_NAME.match(name):
                raise bad(f"records[{i}].m: metric name {str(name)[:70]!r} is not well formed")
            number(value, f"records[{i}].m.{name}", -math.inf, math.inf, False)  # ignored, but finite
            unknown = True
            continue
        low, high, integral = bounds
        kind = type(value)
        if (kind is int or (kind is float and not integral)) and low <= value <= high:
            continue
        number(value, f"records[{i}].m.{name}", low, high, integral)
        raise bad(f"records[{i}].m.{name} is out of range")
    return {k: v for k, v in m.items() if k in ranges} if unknown else m


def _procs(procs, i: int) -> list[dict]:
    where = f"records[{i}].procs"
    procs = _list(procs, where, p.MAX_PROCS)
    extra = False
    for k, entry in enumerate(procs):
        if type(entry) is not dict:
            raise bad(f"{where}[{k}] must be an object")
        pid = entry.get("pid")
        used = entry.get("used_memory", 0)
        sm = entry.get("sm_util", 0)
        if not (
            type(pid) is int and 0 <= pid <= 2**32 - 1
            and type(used) is int and 0 <= used <= p.SAFE_INT
            and (type(sm) is int or type(sm) is float) and 0 <= sm <= 100
        ):
            _proc(entry, f"{where}[{k}]")
            raise bad(f"{where}[{k}] is not a valid process")
        known = 1 + ("used_memory" in entry) + ("sm_util" in entry)
        for key, limit in p.PROC_TEXT.items():
            if key in entry:
                known += 1
                text = entry[key]
                if type(text) is not str or len(text) > limit or "\x00" in text:
                    raise bad(f"{where}[{k}].{key} must be a string of at most {limit} characters")
        extra = extra or len(entry) > known
    if not extra:
        return procs
    # Extra keys are ignored (protocol section 3.2): keep only the known ones.
    keys = ("pid", "used_memory", "sm_util", *p.PROC_TEXT)
    return [{key: e[key] for key in keys if key in e} for e in procs]


def _proc(entry: dict, where: str) -> dict:
    out = {"pid": _int(_required(entry, "pid", f"{where}."), f"{where}.pid", 0, 2**32 - 1)}
    if "used_memory" in entry:
        out["used_memory"] = _int(entry["used_memory"], f"{where}.used_memory", 0, p.SAFE_INT)
    if "sm_util" in entry:
        out["sm_util"] = number(entry["sm_util"], f"{where}.sm_util", 0, 100, False)
    return out


def _event(entry: dict, where: str) -> dict:
    kind = _str(_required(entry, "kind", f"{where}."), f"{where}.kind", 32)
    out = {"kind": kind, "message": ""}
    if "code" in entry:
        out["code"] = _int(entry["code"], f"{where}.code", 0, 65535)
    if "message" in entry:
        if not isinstance(entry["message"], str) or len(entry["message"]) > p.MAX_MESSAGE:
            raise bad(f"{where}.message must be a string of at most {p.MAX_MESSAGE} characters")
        out["message"] = entry["message"]
    return out
