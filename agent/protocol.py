"""Protocol v1 between the agent and the server (docs/agent-protocol.md), and the
messages the server sends browsers (docs/live-protocol.md).

The wire schema, written once: limits, close codes, the value ranges and the typed
frames (msgspec structs) of every frame either way: agent -> server (``Hello``,
``Samples``, ``RulesetApplied``), server -> agent (``Welcome``, ``Ack``, ``Error``,
``DiagnosticsRequest``, ``Ruleset``) and server -> browser (``LiveMessage``). Each
end encodes what it sends from these structs and decodes what it receives into them;
no frame is a hand-built dict. The agent cleans every record against the same ranges
before it is spooled, so a value NVML reports out of range costs one metric, never a
rejected batch. The module imports nothing of the console: the agent ships without it.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import re
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from . import __version__

VERSION = 1
AGENT = f"gpuconsole-agent/{__version__}"

MAX_RECORDS_PER_FRAME = 500
MAX_FRAME_BYTES = 512 * 1024
MAX_PROCS = 256
# Text a process entry may carry (read from /proc by the agent), with its longest length.
PROC_TEXT = {"name": 64, "user": 64, "cmd": 256, "cgroup": 256}
# What a workload may declare its tensor work runs in (GPUCONSOLE_PRECISION in its
# environment); the TFLOP/s estimate's peak follows it (docs/telemetry.md).
PRECISIONS = ("bf16", "fp16", "tf32", "fp8")
PRECISION_ENV = "GPUCONSOLE_PRECISION"
MAX_MESSAGE = 1024

U64 = 2**64 - 1
SAFE_INT = 2**53 - 1

# metric name -> (low, high, integer only)
METRICS: dict[str, tuple[float, float, bool]] = {
    "gpu_util": (0, 100, False),
    "mem_util": (0, 100, False),
    "mem_used": (0, SAFE_INT, True),
    "mem_total": (0, SAFE_INT, True),
    "power_mw": (0, 10_000_000, True),
    "power_limit_mw": (0, 10_000_000, True),
    "temp_c": (-50, 200, False),
    "fan_pct": (0, 255, False),
    "sm_clock_mhz": (0, 100_000, True),
    "mem_clock_mhz": (0, 100_000, True),
    "clocks_event_reasons": (0, U64, True),
    "ecc_corrected_volatile": (0, U64, True),
    "ecc_uncorrected_volatile": (0, U64, True),
    "energy_mj": (0, U64, True),
    "pcie_tx_bytes": (0, U64, True),
    "pcie_rx_bytes": (0, U64, True),
    "nvlink_tx_bytes": (0, U64, True),
    "nvlink_rx_bytes": (0, U64, True),
    "sm_occupancy_pct": (0, 100, False),
    "tensor_active_pct": (0, 100, False),
    "dram_bw_util_pct": (0, 100, False),
}

EVENT_KINDS = ("xid", "gpu_lost", "gpu_back", "health")
MAX_FACTS = 32  # a "health" event's facts (monitoring/health.py: FACTS)

HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
BOOT_ID_RE = re.compile(r"^[0-9a-f]{32}\Z")
METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
PID = (0, 2**32 - 1)
PERCENT = (0, 100)
MAX_HELLO_BYTES = 64 * 1024
MAX_GPUS = 64
MAX_SLICES = 8
MAX_METRICS = 64
EARLIEST_T = 946_684_800.0  # 2000-01-01; the latest is the server's time + FUTURE_SLACK_S
FUTURE_SLACK_S = 86_400.0
# Patterns end with \Z: "$" would also match before a final newline.
GPU_UUID = r"^GPU-[A-Za-z0-9-]{0,92}\Z"
SLICE_UUID = r"^(MIG|VGPU)-[A-Za-z0-9/-]{0,91}\Z"  # a MIG slice or a vGPU
NO_CONTROL = r"^[^\x00-\x1f\x7f]*\Z"
NO_NUL = r"^[^\x00]*\Z"


# --- the typed frames (section 3): every shape and range rule of an agent frame ---------
# Extra keys are ignored; a missing required key or a wrong type is a bad frame. Rules a
# type cannot say are in ``frame_rules`` below: seq order, t against the server's clock,
# metrics or an event, names and ranges of metrics (``metric_error``), unique GPUs.


def _int(low: int, high: int):
    return Annotated[int, Meta(ge=low, le=high)]


def _text(high: int, low: int = 0, pattern: str = NO_CONTROL):
    return Annotated[str, Meta(min_length=low, max_length=high, pattern=pattern)]


BootId = Annotated[str, Meta(pattern=BOOT_ID_RE.pattern)]
Seq = _int(1, SAFE_INT)
Bytes = _int(1, SAFE_INT)


class SliceInfo(Struct):
    uuid: _text(96, 4, SLICE_UUID)
    gpu_instance_id: _int(0, 63)
    profile: _text(32)
    memory_total: Bytes


class GpuInfo(Struct, omit_defaults=True):
    uuid: _text(96, 4, GPU_UUID)
    index: _int(0, 63)
    name: _text(96, 1)
    memory_total: Bytes
    mig_mode: bool
    slices: Annotated[list[SliceInfo], Meta(max_length=MAX_SLICES)]
    pci_bus_id: _text(32) = ""
    power_limit_mw: _int(1, 10_000_000) | None = None
    virtualization: _text(32) = ""  # informational


class Hello(Struct, tag="hello", tag_field="type", omit_defaults=True):
    host: Annotated[str, Meta(max_length=253, pattern=HOST_RE.pattern)]
    boot_id: BootId
    agent: _text(64)
    backend: _text(32, 1)
    gpus: Annotated[list[GpuInfo], Meta(max_length=MAX_GPUS)]
    driver: _text(32) = ""
    v: Literal[1] | UnsetType = UNSET  # required on the wire: a frame without it is refused (4426)

    @property
    def devices(self) -> dict[str, tuple[str, str | None]]:
        """{uuid: (gpu uuid, slice uuid or None)} of every GPU and slice reported."""
        out = {}
        for gpu in self.gpus:
            out[gpu.uuid] = (gpu.uuid, None)
            for s in gpu.slices:
                out[s.uuid] = (gpu.uuid, s.uuid)
        return out


class Proc(Struct, omit_defaults=True, gc=False):
    pid: _int(*PID)
    used_memory: _int(0, SAFE_INT) | UnsetType = UNSET
    sm_util: Annotated[float, Meta(ge=PERCENT[0], le=PERCENT[1])] | UnsetType = UNSET
    name: _text(PROC_TEXT["name"], pattern=NO_NUL) | UnsetType = UNSET
    user: _text(PROC_TEXT["user"], pattern=NO_NUL) | UnsetType = UNSET
    cmd: _text(PROC_TEXT["cmd"], pattern=NO_NUL) | UnsetType = UNSET
    cgroup: _text(PROC_TEXT["cgroup"], pattern=NO_NUL) | UnsetType = UNSET
    precision: Literal[PRECISIONS] | UnsetType = UNSET  # declared by the process


def _metric(low: float, high: float, integral: bool):
    # msgspec bounds an integer within int64; a counter's top (2**64 - 1) is checked
    # by frame_rules (BIG_METRICS).
    bounds = Meta(ge=low, le=high) if high <= 2**63 - 1 else Meta(ge=low)
    return Annotated[int if integral else float, bounds]


# Every metric optional ("absent when not read", never null on the wire: the type does
# not admit null). Decoded, a metric not read is None. Names the schema does not know are
# ignored when well formed with a finite value (``metric_error``), at most MAX_METRICS in
# all. The server keeps the decoded struct: its fields read as attributes, in one tuple
# (``msgspec.structs.astuple``, the order of METRICS) or as the dict of those read
# (``msgspec.to_builtins``, which leaves out the None defaults).
Metrics = msgspec.defstruct("Metrics", [(name, _metric(*rule), None) for name, rule in METRICS.items()],
                            module=__name__, gc=False, omit_defaults=True)
NO_METRICS = Metrics()  # the metrics of an event record, or of one with processes only
BIG_METRICS = tuple(name for name, (_, high, _) in METRICS.items() if high > 2**63 - 1)
_big_values = operator.attrgetter(*BIG_METRICS)


class Event(Struct, omit_defaults=True, gc=False):
    kind: _text(32, 1)
    code: _int(0, 65535) | None = None
    message: Annotated[str, Meta(max_length=MAX_MESSAGE, pattern=NO_NUL)] = ""
    # A "health" event: the GPU's health facts (ECC, retired pages, row remapping, links),
    # sent when they change.
    facts: Annotated[dict[Annotated[str, Meta(pattern=METRIC_NAME.pattern)], _int(0, SAFE_INT)],
                     Meta(max_length=MAX_FACTS)] | UnsetType = UNSET


class Record(Struct, omit_defaults=True, gc=False):
    seq: Seq
    t: Annotated[float, Meta(ge=EARLIEST_T)]
    gpu: _text(96, 4, GPU_UUID)
    slice: _text(96, 4, SLICE_UUID) | None = None
    m: Metrics | UnsetType = UNSET
    procs: Annotated[list[Proc], Meta(max_length=MAX_PROCS)] | None | UnsetType = UNSET
    event: Event | UnsetType = UNSET

    @property
    def device(self) -> str:
        """The slice's UUID for a slice record, else the GPU's."""
        return self.slice or self.gpu


class Samples(Struct, tag="samples", tag_field="type", gc=False):
    boot_id: BootId
    records: Annotated[list[Record], Meta(min_length=1, max_length=MAX_RECORDS_PER_FRAME)]
    v: Literal[1] | UnsetType = UNSET  # required on the wire: a frame without it is refused (4426)

    @property
    def first_seq(self) -> int:
        return self.records[0].seq

    @property
    def last_seq(self) -> int:
        return self.records[-1].seq


def frame_rules(frame: Samples, *, latest_t: float) -> tuple[str, str, int] | None:
    """What a decoded samples frame breaks beyond its types, as (error code, message,
    close code), or None. It also leaves each record's ``m`` a ``Metrics`` (NO_METRICS
    when none), ``procs`` None when absent and ``event`` None on metrics."""
    previous = 0
    for i, record in enumerate(frame.records):
        if record.seq <= previous:
            return ("seq_not_increasing", f"records[{i}].seq {record.seq} does not follow {previous}: "
                    "seqs must increase within a frame", CLOSE_SEQ)
        previous = record.seq
        if record.t > latest_t:
            return "bad_field", f"records[{i}].t must be a number between {EARLIEST_T:g} and {latest_t:g}", CLOSE_BAD_FRAME
        m = record.m
        if record.event is not UNSET:
            if m is not UNSET or record.procs is not UNSET:
                return "bad_frame", f"records[{i}] has both an event and metrics", CLOSE_BAD_FRAME
            if record.event.kind == "xid" and record.event.code is None:
                return "bad_field", f"records[{i}].event.code is required for an xid event", CLOSE_BAD_FRAME
            record.m, record.procs = NO_METRICS, None
            continue
        if m is UNSET:
            if record.procs is UNSET:
                return "bad_frame", f"records[{i}] has neither m, procs nor event", CLOSE_BAD_FRAME
            record.m = NO_METRICS
        elif sum(filter(None, _big_values(m))) > U64:  # each is ≥ 0: one above U64 shows in the sum
            for name in BIG_METRICS:
                if (getattr(m, name) or 0) > U64:
                    return ("bad_field", f"records[{i}].m.{name} must be an integer between 0 and {U64:g}",
                            CLOSE_BAD_FRAME)
        if record.procs is UNSET:
            record.procs = None
        record.event = None
    return None


def hello_rules(hello: Hello) -> str | None:
    """What a decoded hello breaks beyond its types: a GPU index or UUID twice."""
    uuids, indexes = set(), set()
    for i, gpu in enumerate(hello.gpus):
        if gpu.index in indexes:
            return f"gpus[{i}].index {gpu.index} is reported twice"
        indexes.add(gpu.index)
        for uuid in (gpu.uuid, *(s.uuid for s in gpu.slices)):
            if uuid in uuids:
                return f"gpus[{i}]: UUID {uuid} is reported twice"
            uuids.add(uuid)
    return None


def encode_procs(procs: list[Proc]) -> str:
    """Processes as compact JSON (what the server stores)."""
    return msgspec.json.encode(procs).decode()

# How long the agent waits for the welcome after its hello (then it closes and
# connects again later); the server skips a hello whose turn comes after it.
WELCOME_TIMEOUT_S = 10.0

# Close codes sent by the server.
CLOSE_BAD_FRAME = 4400
CLOSE_BAD_TOKEN = 4401
CLOSE_GPU_CONFLICT = 4403
CLOSE_HELLO_TIMEOUT = 4408
CLOSE_SEQ = 4409
CLOSE_TOO_LARGE = 4413
CLOSE_VERSION = 4426
CLOSE_FLOOD = 4429
CLOSE_TOKEN_EXPIRED = 4440  # retried: the agent reads its token file again first
CLOSE_SERVER_ERROR = 4500  # retried; the batch in flight stays spooled

# What the agent does about a close code: retry, drop the batch in flight, or stop.
RETRY, DROP, FATAL = "retry", "drop", "fatal"
_ACTIONS = {
    CLOSE_BAD_FRAME: DROP,
    CLOSE_SEQ: DROP,
    CLOSE_TOO_LARGE: DROP,
    CLOSE_BAD_TOKEN: FATAL,
    CLOSE_GPU_CONFLICT: FATAL,
    CLOSE_VERSION: FATAL,
}

CLOSE_MEANING = {
    1000: "closed normally",
    1001: "going away",
    1006: "connection lost",
    1011: "server error",
    1012: "server restarting",
    1013: "try again later",
    CLOSE_BAD_FRAME: "bad frame",
    CLOSE_BAD_TOKEN: "bad or revoked token",
    CLOSE_GPU_CONFLICT: "a GPU belongs to another host",
    CLOSE_HELLO_TIMEOUT: "hello not sent first or too late",
    CLOSE_SEQ: "seq not increasing",
    CLOSE_TOO_LARGE: "frame too large",
    CLOSE_VERSION: "unsupported protocol version",
    CLOSE_FLOOD: "frames sent without waiting for acks",
    CLOSE_TOKEN_EXPIRED: "the host token expired",
    CLOSE_SERVER_ERROR: "server error",
}



def close_action(code: int) -> str:
    return _ACTIONS.get(code, RETRY)


def describe_close(code: int, reason: str = "") -> str:
    text = f"{code} {CLOSE_MEANING.get(code, 'closed')}"
    return f"{text}: {reason}" if reason else text


_encoder = msgspec.json.Encoder()


def encode(obj) -> str:
    """Compact JSON text in ASCII, so that len(text) is its size in bytes: a frame or a
    record of this schema's structs (or plain data). Strings outside ASCII are escaped."""
    data = _encoder.encode(obj)
    if data.isascii():
        return data.decode("ascii")
    return json.dumps(msgspec.json.decode(data), separators=(",", ":"))


dumps = encode


def hello_frame(
    *, host: str, boot_id: str, backend: str, gpus: list[dict], driver: str | None = None
) -> str:
    """The hello. ``gpus`` are the backend's GPU entries, each with the keys of
    ``GpuInfo`` (a recorded trace may carry more; they go as they are)."""
    return encode(Hello(host=host, boot_id=boot_id, agent=AGENT, backend=backend, gpus=gpus,
                        driver=driver or "", v=VERSION))


def to_record(raw: dict, seq: int) -> Record | None:
    """A backend's reading as the record the wire carries, or None when nothing in it
    is sendable: values out of range left out (``clean_metrics``), processes kept as
    ``clean_procs`` keeps them, an event's message without NUL. Metrics stay a dict of
    the cleaned values: the names of ``Metrics`` and any well-formed newer ones, in the
    order read."""
    event = raw.get("event")
    if event is not None:
        if event.get("kind") not in EVENT_KINDS or (event["kind"] == "xid" and event.get("code") is None):
            return None  # the server refuses an xid without its code
        if "message" in event:
            event = dict(event, message=str(event["message"]).replace("\x00", "")[:MAX_MESSAGE])  # the server refuses NUL
        return Record(seq=seq, t=raw["t"], gpu=raw["gpu"], slice=raw.get("slice"), event=Event(**event))
    m = raw.get("m")
    if m:
        m = clean_metrics(m)
    procs = raw.get("procs")
    if procs is None and not m:
        return None
    return Record(seq=seq, t=raw["t"], gpu=raw["gpu"], slice=raw.get("slice"), m=m or UNSET,
                  procs=UNSET if procs is None else [Proc(**p) for p in clean_procs(procs)])


def encode_record(raw: dict, seq: int) -> str | None:
    """``to_record``, encoded (what the outbox keeps and the spool stores)."""
    found = to_record(raw, seq)
    return None if found is None else encode(found)


def _samples_envelope() -> tuple[str, str]:
    """The text of a samples frame around its records, from the ``Samples`` struct."""
    text = encode(Samples(boot_id="%s", records=[], v=VERSION))
    head, tail = text.split("[]")
    return head + "[", "]" + tail


_SAMPLES_HEAD, _SAMPLES_TAIL = _samples_envelope()
FRAME_OVERHEAD = len(_SAMPLES_HEAD % ("0" * 32)) + len(_SAMPLES_TAIL)


def samples_frame(boot_id: str, bodies: list[str]) -> str:
    """A samples frame from records already encoded (``encode_record``), as spooled."""
    return _SAMPLES_HEAD % boot_id + ",".join(bodies) + _SAMPLES_TAIL


def metric_error(name: str, value) -> str | None:
    """What is wrong with one metric value (``value`` an int or a float), or None.

    The server refuses a frame holding such a value; the agent leaves the value out.
    An unknown name passes (a v1 server ignores it) when the value is finite."""
    bounds = METRICS.get(name)
    if bounds is None:
        if not METRIC_NAME.match(name):
            return f"metric name {name[:70]!r} is not well formed"
        return None if type(value) is int or math.isfinite(value) else "must be finite"
    low, high, integral = bounds
    if low <= value <= high and (not integral or type(value) is int):  # False for NaN
        return None
    return f"must be {'an integer' if integral else 'a number'} between {low:g} and {high:g}"


def clean_metrics(m: dict) -> dict:
    """Drop values that are not finite numbers inside the documented range (an integer
    metric read as a whole float is sent as an integer)."""
    out = {}
    for name, value in m.items():
        if type(value) is not int and type(value) is not float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            value = int(value) if isinstance(value, int) else float(value)
        if type(value) is float and value.is_integer() and METRICS.get(name, (0, 0, False))[2]:
            value = int(value)
        if metric_error(name, value) is None:
            out[name] = value
    return out


def clean_procs(procs: list[dict]) -> list[dict]:
    """Keep well-formed process entries, the largest memory users first, at most MAX_PROCS."""
    out = []
    for p in procs:
        pid = p.get("pid")
        if not _is_int(pid) or not PID[0] <= pid <= PID[1]:
            continue
        entry = {"pid": pid}
        used = p.get("used_memory")
        if used is not None and _is_int(used) and 0 <= used <= SAFE_INT:
            entry["used_memory"] = used
        sm = p.get("sm_util")
        if sm is not None and isinstance(sm, int | float) and not isinstance(sm, bool):
            if PERCENT[0] <= sm <= PERCENT[1]:
                entry["sm_util"] = sm
        for key, limit in PROC_TEXT.items():
            text = p.get(key)
            if isinstance(text, str) and text:
                entry[key] = text[:limit].replace("\x00", "")
        if p.get("precision") in PRECISIONS:
            entry["precision"] = p["precision"]
        out.append(entry)
    if len(out) > MAX_PROCS:
        out.sort(key=lambda e: e.get("used_memory", -1), reverse=True)
        del out[MAX_PROCS:]
    return out


def _is_int(value) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def clean_record(record: dict) -> dict | None:
    """The record as it may go on the wire (``to_record``), as plain data without its
    seq, or None when nothing in it is sendable."""
    found = to_record(record, 1)
    if found is None:
        return None
    out = msgspec.to_builtins(found)
    del out["seq"]
    return out


# --- server -> agent: welcome, ack, error, diagnostics (and ``Ruleset`` below) ---------------
# The server encodes these structs; the agent decodes them. Fields the agent does not
# act on have defaults, so a server that leaves them out is still understood.


class Welcome(Struct, tag="welcome", tag_field="type"):
    v: int  # any version decodes: the agent refuses one it does not speak, by name
    host: str = ""
    server_time: float | None = None
    registered: list[str] = msgspec.field(default_factory=list)  # GPU and slice UUIDs new to the console
    vanished: list[str] = msgspec.field(default_factory=list)  # those the host no longer reports


class Ack(Struct, tag="ack", tag_field="type"):
    """Every record of ``boot_id`` up to ``seq`` is stored."""

    boot_id: str
    seq: _int(0, SAFE_INT)


class Error(Struct, tag="error", tag_field="type", omit_defaults=True):
    """Sent before a close; ``boot_id`` and ``seq`` name the frame refused, when one was."""

    code: _text(64)
    message: _text(MAX_MESSAGE, pattern=NO_NUL) = ""
    boot_id: str | None = None
    seq: int | None = None


class DiagnosticsRequest(Struct, tag="diagnostics", tag_field="type", kw_only=True):
    """Collect a diagnostics bundle and upload it to ``upload`` with ``key``."""

    id: _int(1, SAFE_INT)
    key: _text(128, 1)
    max_bytes: _int(0, SAFE_INT) = 0  # 0: the agent's own limit
    upload: _text(256, 1)


class _Typed(Struct):
    type: str


_frame_type = msgspec.json.Decoder(_Typed)
_server_frames = msgspec.json.Decoder(Welcome | Ack | Error | DiagnosticsRequest)
SERVER_FRAME_TYPES = ("welcome", "ack", "error", "diagnostics", "ruleset")


def server_frame_type(text) -> str | None:
    """The ``type`` of a server frame, or None when it is not a JSON object with one."""
    if not isinstance(text, str):
        return None
    try:
        return _frame_type.decode(text).type
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def parse_server_frame(text: str) -> Welcome | Ack | Error | DiagnosticsRequest:
    """A welcome, ack, error or diagnostics frame (``msgspec.ValidationError`` or
    ``DecodeError`` when it is not one of them, well formed)."""
    return _server_frames.decode(text)


# --- server -> browser (docs/live-protocol.md): the messages of /ws/live/ -------------------
# The agent sends none of these; they are here so that a reading's metrics are the wire's
# ``Metrics`` all the way to the browser, with its names and ranges written once.


class LiveReading(Struct, gc=False):
    """A GPU's or slice's current reading as a browser gets it (the ``gpus`` event)."""

    uuid: str
    host: str
    index: int | None
    instance: int | None
    team: int | None
    t: str  # ISO 8601, UTC
    m: Metrics  # encoded with the metrics read only (``omit_defaults``)
    stale: bool


class Gpus(Struct):
    gpus: list[LiveReading]


LIVE_KINDS = ("team", "instance", "host", "fleet")  # what a browser may subscribe to


class Subscription(Struct):
    """The data of ``subscribed`` and ``unsubscribed``: what the browser asked for."""

    kind: Literal[LIVE_KINDS]
    id: int | None


class LiveError(Struct):
    """The data of ``error``, sent before the socket closes with 4400."""

    message: str


# The data of the published events, field for field the JSON a browser always received
# (static/): every key is sent, a missing value as null, hence no ``omit_defaults``.
# ``kw_only`` lets a field that may be null default to it without moving it: the order
# of the fields is the order of the keys on the wire.


class LiveAlert(Struct, kw_only=True):
    """The data of ``alert``: an alert opened, updated or resolved (alerting.alerts)."""

    id: int
    kind: str
    category: str
    severity: str
    state: str
    message: str
    uuid: str  # "" when the alert is not about one GPU
    instance: int | None = None
    team: int | None = None
    host: int | None = None
    rule: int | None = None
    value: float | None = None
    opened_at: str  # ISO 8601
    updated_at: str
    resolved_at: str | None = None


class LiveBudget(Struct):
    """The data of ``budget``: a team's spend crossed a threshold of its month's budget."""

    team: int
    basis: str  # "actual" or "forecast"
    percent: int
    spend: str  # a decimal, as text
    amount: str
    currency: str
    message: str


class LivePreemption(Struct):
    """The data of ``preemption``: the platform takes an instance back at ``preempt_at``."""

    team: int
    instance: int
    name: str
    preempt_at: str  # ISO 8601
    seconds: int  # the notice given
    reason: str


class LiveMaintenance(Struct):
    """The data of ``maintenance``: the host of an instance that is not preempted is drained."""

    team: int
    instance: int
    name: str
    message: str


class LiveInstance(Struct):
    """The data of ``instance``: an instance changed state."""

    id: int
    name: str
    state: str
    team: int


LiveData = Gpus | Subscription | LiveError | LiveAlert | LiveInstance | LiveBudget | LivePreemption | LiveMaintenance

LIVE_EVENTS: dict[str, type] = {
    "gpus": Gpus,
    "subscribed": Subscription,
    "unsubscribed": Subscription,
    "error": LiveError,
    "alert": LiveAlert,
    "instance": LiveInstance,
    "budget": LiveBudget,
    "preemption": LivePreemption,
    "maintenance": LiveMaintenance,
}


class LiveMessage(Struct):
    """Every message a browser receives: its ``event`` names the type of its ``data``
    (``LIVE_EVENTS``); any other pair is refused when the message is built."""

    event: str
    data: LiveData

    def __post_init__(self):
        expected = LIVE_EVENTS.get(self.event)
        if expected is None:
            raise ValueError(f"unknown live event {self.event!r}")
        if type(self.data) is not expected:
            raise TypeError(f"the data of {self.event!r} is a {expected.__name__}, not {type(self.data).__name__}")


def live_text(event: str, data: LiveData) -> str:
    """The text of a browser message (``encode``: compact, ASCII)."""
    return encode(LiveMessage(event, data))


def _gpus_envelope() -> tuple[str, str]:
    """The text of a ``gpus`` message around its readings, from ``LiveMessage``: a batch
    of readings encoded once is sent to many sockets, joined in between."""
    head, tail = live_text("gpus", Gpus(gpus=[])).split("[]")
    return head + "[", "]" + tail


GPUS_HEAD, GPUS_TAIL = _gpus_envelope()


# --- network rules (docs/network.md): server "ruleset" -> agent "ruleset_applied" ------------
# A host's desired rules, whole: every interface of its instances with the allow rules
# in each direction. A rule names its peers as CIDRs or as a security group, whose
# members' addresses the ruleset lists once under ``groups``.
MAX_NET_INTERFACES = 4096
MAX_NET_RULES = 512
MAX_NET_PEERS = 4096
IFNAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}\Z"  # Linux: at most 15 bytes
CIDR4 = r"^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}/([0-9]|[12][0-9]|3[0-2])\Z"
NET_GROUP = r"^g[0-9]{1,18}\Z"
Port = Annotated[int, Meta(ge=0, le=65535)]
Cidr = Annotated[str, Meta(pattern=CIDR4)]
GroupRef = Annotated[str, Meta(pattern=NET_GROUP)]


class NetRule(Struct, gc=False, omit_defaults=True):
    proto: Literal["tcp", "udp", "icmp", "any"]
    peers: Annotated[list[Cidr], Meta(max_length=MAX_NET_PEERS)] = msgspec.field(default_factory=list)
    group: GroupRef | Literal[""] = ""  # the members of this group (``Ruleset.groups``), instead of peers
    ports: tuple[Port, Port] | None = None  # tcp/udp only; None: every port


class NetInterface(Struct, gc=False):
    ifname: Annotated[str, Meta(pattern=IFNAME)]
    address: Cidr  # the instance's own address, as a /32
    inbound: Annotated[list[NetRule], Meta(max_length=MAX_NET_RULES)]
    outbound: Annotated[list[NetRule], Meta(max_length=MAX_NET_RULES)]


class Ruleset(Struct, tag="ruleset", tag_field="type"):
    version: _int(1, SAFE_INT)
    hash: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}\Z")]
    interfaces: Annotated[list[NetInterface], Meta(max_length=MAX_NET_INTERFACES)]
    groups: dict[GroupRef, Annotated[list[Cidr], Meta(max_length=MAX_NET_PEERS)]] = msgspec.field(
        default_factory=dict)


class RulesetApplied(Struct, tag="ruleset_applied", tag_field="type", omit_defaults=True):
    version: _int(0, SAFE_INT)  # the version in force on the host (0: none yet)
    hash: Annotated[str, Meta(pattern=r"^([0-9a-f]{64})?\Z")]
    ok: bool  # False: the version offered was refused; ``version`` is still the one in force
    offered: _int(0, SAFE_INT) = 0
    error: _text(MAX_MESSAGE) = ""


def ruleset_digest(interfaces: list[NetInterface], groups: dict[str, list[str]] | None = None) -> str:
    """SHA-256 of the ruleset's canonical JSON (its groups, then its interfaces): what
    both ends compare."""
    return hashlib.sha256(msgspec.json.encode([dict(sorted((groups or {}).items())), interfaces])).hexdigest()
