"""Protocol v1 between the agent and the server (docs/agent-protocol.md).

Frame builders, limits, close codes and the value ranges the server enforces.
The agent cleans every record against the same ranges before it is spooled, so a
value NVML reports out of range costs one metric, never a rejected batch.
"""

from __future__ import annotations

import json
import math
import re

from . import __version__

VERSION = 1
AGENT = f"gpuconsole-agent/{__version__}"

MAX_RECORDS_PER_FRAME = 500
MAX_FRAME_BYTES = 512 * 1024
MAX_PROCS = 256
# Text a process entry may carry (read from /proc by the agent), with its longest length.
PROC_TEXT = {"name": 64, "user": 64, "cmd": 256, "cgroup": 256}
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

EVENT_KINDS = ("xid", "gpu_lost", "gpu_back")

# Close codes sent by the server.
CLOSE_BAD_FRAME = 4400
CLOSE_BAD_TOKEN = 4401
CLOSE_GPU_CONFLICT = 4403
CLOSE_HELLO_TIMEOUT = 4408
CLOSE_SEQ = 4409
CLOSE_TOO_LARGE = 4413
CLOSE_VERSION = 4426
CLOSE_FLOOD = 4429

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
}

HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
BOOT_ID_RE = re.compile(r"^[0-9a-f]{32}$")


def close_action(code: int) -> str:
    return _ACTIONS.get(code, RETRY)


def describe_close(code: int, reason: str = "") -> str:
    text = f"{code} {CLOSE_MEANING.get(code, 'closed')}"
    return f"{text}: {reason}" if reason else text


def _compact_encoder():
    """obj -> compact ASCII JSON without NaN/infinity, made once.

    json.dumps(obj, separators=...) builds an encoder on every call, which costs as
    much as encoding a whole record; CPython's C encoder, made once, is reused instead.
    Where it is missing or behaves differently, a JSONEncoder made once does the work.
    """
    plain = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
    fallback = plain.encode
    try:
        from json.encoder import c_make_encoder, encode_basestring_ascii

        encode = c_make_encoder(None, plain.default, encode_basestring_ascii, None, ":", ",",
                                False, False, False)  # fmt: skip

        def compact(obj) -> str:
            return "".join(encode(obj, 0))

        probe = {"a": [1, 2.5, "\u00e9\n", None, True], "b": {"c": 2**64 - 1}}
        if compact(probe) != fallback(probe):
            return fallback
        try:
            compact({"n": math.nan})
        except ValueError:
            return compact
    except Exception:  # noqa: BLE001 (any surprise: use the plain encoder)
        pass
    return fallback


_encode = _compact_encoder()


def dumps(obj) -> str:
    """Compact ASCII JSON, so that len(text) is the frame's size in bytes."""
    return _encode(obj)


def hello_frame(
    *, host: str, boot_id: str, backend: str, gpus: list[dict], driver: str | None = None
) -> str:
    hello = {
        "type": "hello",
        "v": VERSION,
        "host": host,
        "boot_id": boot_id,
        "agent": AGENT,
        "backend": backend,
        "gpus": gpus,
    }
    if driver:
        hello["driver"] = driver
    return dumps(hello)


_SAMPLES_HEAD = '{"type":"samples","v":1,"boot_id":"%s","records":['
FRAME_OVERHEAD = len(_SAMPLES_HEAD % ("0" * 32)) + len("]}")


def samples_frame(boot_id: str, bodies: list[str]) -> str:
    """A samples frame from records already encoded with :func:`dumps`."""
    return _SAMPLES_HEAD % boot_id + ",".join(bodies) + "]}"


def _clean_value(name: str, value):
    """The general rule for one metric value: the value to send, or None to drop it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    bounds = METRICS.get(name)
    if bounds is not None:
        low, high, integral = bounds
        if not low <= value <= high:
            return None
        if integral and isinstance(value, float):
            if not value.is_integer():
                return None
            value = int(value)
    return value


def clean_metrics(m: dict) -> dict:
    """Drop values that are not finite numbers inside the documented range.

    Unknown names pass through (a v1 server ignores them) as long as they are finite.
    Plain ints and floats (what the backends produce) take a short way; anything else
    (bools, int subclasses, other types) the general one.
    """
    out = {}
    bounds_of = METRICS.get
    for name, value in m.items():
        kind = type(value)
        if kind is int:
            bounds = bounds_of(name)
            if bounds is None or bounds[0] <= value <= bounds[1]:
                out[name] = value
        elif kind is float:
            bounds = bounds_of(name)
            if bounds is None:
                if math.isfinite(value):
                    out[name] = value
            elif bounds[0] <= value <= bounds[1]:  # False for NaN; bounds are finite
                if not bounds[2]:
                    out[name] = value
                elif value.is_integer():
                    out[name] = int(value)
        else:
            value = _clean_value(name, value)
            if value is not None:
                out[name] = value
    return out


def _is_int(value) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def clean_procs(procs: list[dict]) -> list[dict]:
    """Keep well-formed process entries, the largest memory users first, at most MAX_PROCS."""
    out = []
    for p in procs:
        pid = p.get("pid")
        if not _is_int(pid) or not 0 <= pid <= 4_294_967_295:
            continue
        entry = {"pid": pid}
        used = p.get("used_memory")
        if used is not None and _is_int(used) and 0 <= used <= SAFE_INT:
            entry["used_memory"] = used
        sm = p.get("sm_util")
        if sm is not None and isinstance(sm, int | float) and not isinstance(sm, bool):
            if 0 <= sm <= 100:
                entry["sm_util"] = sm
        for key, limit in PROC_TEXT.items():
            text = p.get(key)
            if isinstance(text, str) and text:
                entry[key] = text[:limit]
        out.append(entry)
    if len(out) > MAX_PROCS:
        out.sort(key=lambda e: e.get("used_memory", -1), reverse=True)
        del out[MAX_PROCS:]
    return out


def clean_record(record: dict) -> dict | None:
    """The record as it may go on the wire, or None when nothing in it is sendable."""
    if "event" in record:
        event = dict(record["event"])
        if event.get("kind") not in EVENT_KINDS:
            return None
        if "message" in event:
            event["message"] = str(event["message"])[:MAX_MESSAGE]
        record = dict(record, event=event)
        return record
    out = {k: v for k, v in record.items() if k != "m" and k != "procs"}
    m = record.get("m")
    if m:
        m = clean_metrics(m)
        if m:
            out["m"] = m
    procs = record.get("procs")
    if procs is not None:
        out["procs"] = clean_procs(procs)
    elif "m" not in out:
        return None
    return out


def parse_server_frame(text) -> dict | None:
    """A server frame as a dict, or None when it is not a JSON object with a type."""
    if not isinstance(text, str):
        return None
    try:
        frame = json.loads(text)
    except ValueError:
        return None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        return None
    return frame
