"""Reading agent frames, protocol v1 (docs/agent-protocol.md). Pure: no database.

The rules are the wire schema's (``agent.protocol``): a frame is decoded
straight into its typed structs (msgspec), then checked against the rules a type cannot
say (``protocol.frame_rules``). A frame is accepted whole or refused whole:
``FrameError`` carries the close code, the error slug of section 6 and one sentence
naming the offending field.

Extra keys are ignored, and JSON may nest at most 32 levels. Only the schema's own
keys can nest, and not that deep, so a frame without extra keys is decoded once, by a
decoder that refuses extra keys. A frame it refuses (extra keys, or anything wrong) is
read again by ``console.jsonlimits`` (size, JSON, depth) and the schema that ignores
extra keys, which also names what is wrong.

Checking string patterns costs more than the rest of a decode, and most cannot fail on
most frames: a string holds a control character only when the JSON text escapes one
(raw ones are not JSON) or holds DEL. So a samples frame without backslashes or DEL is
decoded without the patterns that only refuse control characters, and without the
GPU and slice UUID patterns, which are then checked once per distinct UUID of the
frame; a frame that fails any of this is decoded again with every pattern, so the
rules and the errors are the schema's either way.
"""

from __future__ import annotations

import operator
import re
import types
import typing
from functools import cache, reduce

import msgspec
from msgspec import inspect as mi

from agent import protocol as p
from agent.protocol import (  # noqa: F401 (the frames' types, as the server names them)
    MAX_HELLO_BYTES,
    Ack,
    Error,
    Event,
    GpuInfo,
    Hello,
    Metrics,
    Proc,
    Record,
    Samples,
    SliceInfo,
    Welcome,
)
from console import jsonlimits


class FrameError(Exception):
    def __init__(self, close_code: int, code: str, message: str, *, boot_id: str | None = None,
                 seq: int | None = None):
        super().__init__(message)
        self.close_code = close_code
        self.code = code
        self.message = message[: p.MAX_MESSAGE]
        self.boot_id = boot_id
        self.seq = seq

    def frame(self) -> p.Error:
        return p.Error(code=self.code, message=self.message, boot_id=self.boot_id, seq=self.seq)


def bad(message: str, code: str = "bad_field") -> FrameError:
    return FrameError(p.CLOSE_BAD_FRAME, code, message)


def read(text, *, hello_expected: bool = False, now: float) -> Hello | Samples:
    """The frame, decoded and checked: a ``Hello`` when one is expected, else ``Samples``."""
    if not isinstance(text, str):
        raise bad("binary frames are not allowed; send JSON text", "bad_frame")
    limit = MAX_HELLO_BYTES if hello_expected else p.MAX_FRAME_BYTES
    if len(text) > limit:
        what = "a hello" if hello_expected else "a frame"
        raise FrameError(p.CLOSE_TOO_LARGE, "frame_too_large", f"{what} of {len(text)} bytes exceeds {limit}")
    kind = Hello if hello_expected else Samples
    frame = None
    if kind is Samples and "\\" not in text and "\x7f" not in text:
        frame = _decode(_decoder(kind, relaxed=True), text)
        if frame is not None and not _uuids_well_formed(frame):
            frame = None
    if frame is None:
        frame = _decode(_decoder(kind), text)
    if frame is None or frame.v is msgspec.UNSET:
        frame = _read_general(text, kind, limit)
    if kind is Hello:
        broken = p.hello_rules(frame)
        if broken is not None:
            raise bad(broken)
        return frame
    broken = p.frame_rules(frame, latest_t=now + p.FUTURE_SLACK_S)
    if broken is not None:
        code, message, close_code = broken
        raise FrameError(close_code, code, message, boot_id=frame.boot_id, seq=frame.first_seq)
    return frame


def _decode(decoder: msgspec.json.Decoder, text: str):
    try:
        return decoder.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeError):
        return None


# Patterns a frame without backslashes or DEL cannot break (see the module's doc), and
# those checked per distinct value by _uuids_well_formed.
_RELAXED = frozenset({p.NO_CONTROL, p.NO_NUL, p.GPU_UUID, p.SLICE_UUID})
_GPU_UUID = re.compile(p.GPU_UUID)
_SLICE_UUID = re.compile(p.SLICE_UUID)


def _uuids_well_formed(frame: Samples) -> bool:
    records = frame.records
    if not all(map(_GPU_UUID.match, {r.gpu for r in records})):
        return False
    slices = {r.slice for r in records}
    slices.discard(None)
    return all(map(_SLICE_UUID.match, slices))


@cache
def _decoder(kind: type, relaxed: bool = False) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(_strict(kind, {}, relaxed))


def _strict(tp, made: dict, relaxed: bool = False):
    """``tp`` with every struct in it refusing extra keys (same fields, same rules;
    ``relaxed``: without the patterns of _RELAXED)."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if tp not in made:
            hints = typing.get_type_hints(tp, include_extras=True)
            fields = [(f.name, _strict(hints[f.name], made, relaxed)) if f.required
                      else (f.name, _strict(hints[f.name], made, relaxed), f.default)
                      for f in msgspec.structs.fields(tp)]
            config = tp.__struct_config__
            made[tp] = msgspec.defstruct(tp.__name__, fields, bases=(tp,), forbid_unknown_fields=True,
                                         tag=config.tag, tag_field=config.tag_field)
        return made[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        metadata = tp.__metadata__
        if relaxed:
            metadata = tuple(_without_pattern(m) if isinstance(m, msgspec.Meta) and m.pattern in _RELAXED else m
                             for m in metadata)
        return typing.Annotated[(_strict(args[0], made, relaxed), *metadata)]
    if origin in (typing.Union, types.UnionType):
        return reduce(operator.or_, [_strict(a, made, relaxed) for a in args])
    if origin is list:
        return list[_strict(args[0], made, relaxed)]
    return tp


_META_FIELDS = ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length", "tz", "title", "description",
                "examples", "extra_json_schema", "extra")


def _without_pattern(meta: msgspec.Meta) -> msgspec.Meta:
    return msgspec.Meta(**{k: getattr(meta, k) for k in _META_FIELDS if getattr(meta, k) is not None})


def _no_constants(name: str):
    raise bad(f"{name} is not a number JSON allows (numbers must be finite)")


def _read_general(text: str, kind: type, limit: int) -> Hello | Samples:
    try:
        frame = jsonlimits.loads(text, max_bytes=limit, parse_constant=_no_constants)
    except jsonlimits.JsonRefused as exc:
        raise bad(f"the frame is {exc.message}" if exc.code == "bad_json" else exc.message, "bad_json") from None
    if not isinstance(frame, dict):
        raise bad("a frame must be a JSON object", "bad_json")
    # msgspec's decoder refuses a lone surrogate escape, the json module does not: only
    # here can one reach a struct (and the database, which cannot store it). NUL is the
    # schema's to refuse, with its own message.
    if (found := jsonlimits.find_unstorable(frame, refuse=jsonlimits.SURROGATES)) is not None:
        raise bad(f"{found[0] or 'the frame'}: {found[1]}")
    if not isinstance(frame.get("type"), str):
        raise bad("type is missing or not a string", "bad_frame")
    if frame.get("v") != p.VERSION or isinstance(frame.get("v"), bool):
        raise FrameError(p.CLOSE_VERSION, "unsupported_version", f"v must be {p.VERSION}, not {frame.get('v')!r}")
    found = frame["type"]
    if kind is Hello and found != "hello":
        raise FrameError(p.CLOSE_HELLO_TIMEOUT, "hello_required", f"the first frame must be a hello, not {found[:40]!r}")
    if kind is Samples and found == "hello":
        raise bad("hello was already sent on this connection", "unexpected_hello")
    if kind is Samples and found != "samples":
        raise bad(f"unknown frame type {found[:40]!r}", "unknown_type")
    message = _unknown_metric(frame) if kind is Samples else None
    if message is None:
        try:
            return msgspec.convert(frame, kind)
        except msgspec.ValidationError as exc:
            message = explain(str(exc), frame, kind)
    error = bad(message)
    if kind is Samples:
        error.boot_id = frame["boot_id"] if p.BOOT_ID_RE.match(str(frame.get("boot_id"))) else None
        records = frame.get("records")
        first = records[0].get("seq") if isinstance(records, list) and records and isinstance(records[0], dict) else None
        error.seq = first if type(first) is int else None
    raise error


def _unknown_metric(frame: dict) -> str | None:
    """What is wrong with the metrics the schema does not name (they are ignored when
    well formed and finite), or with how many metrics a record holds."""
    records = frame.get("records")
    for i, record in enumerate(records if isinstance(records, list) else ()):
        m = record.get("m") if isinstance(record, dict) else None
        if not isinstance(m, dict):
            continue
        if len(m) > p.MAX_METRICS:
            return f"records[{i}].m has {len(m)} metrics; at most {p.MAX_METRICS} are allowed"
        for name, value in m.items():
            if name in p.METRICS:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"records[{i}].m.{name} must be a number"
            error = p.metric_error(name, value)
            if error is not None:
                return f"records[{i}].m" + (": " if error.startswith("metric name") else f".{name} ") + error
    return None


# --- what the schema's errors say, in the protocol's words ----------------------------------

_AT = re.compile(r"^(.*?)(?: - at `\$(.*)`)?$", re.S)
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]")


def explain(error: str, frame: dict, kind: type) -> str:
    """One sentence naming the field, from msgspec's error and the frame it was about."""
    try:
        return _explain(error, frame, kind)
    except (LookupError, TypeError, ValueError, AttributeError, StopIteration):
        return error  # msgspec's own words still name the field


def _explain(error: str, frame: dict, kind: type) -> str:
    text, path = _AT.match(error).groups()
    where = (path or "").lstrip(".")
    missing = re.match(r"Object missing required field `(\w+)`", text)
    if missing:
        return f"{where + '.' if where else ''}{missing[1]} is required"
    steps = _steps(where)
    if len(steps) >= 2 and steps[-2] == "m" and steps[-1] in p.METRICS:
        return f"{where} {_number_rule(steps[-1])}"
    info, value = _type_at(kind, where), _value_at(frame, where)
    return f"{where} {_rule(info, value)}"


def _number_rule(name: str) -> str:
    low, high, integral = p.METRICS.get(name, (float("-inf"), float("inf"), False))
    return f"must be {'an integer' if integral else 'a number'} between {low:g} and {high:g}"


def _steps(where: str) -> list:
    return [name or int(index) for name, index in _STEP.findall("." + where)]


def _value_at(frame, where: str):
    for step in _steps(where):
        frame = frame[step]
    return frame


def _type_at(kind: type, where: str):
    info = mi.type_info(kind)
    for step in _steps(where):
        info = _concrete(info)
        if isinstance(step, int):
            info = info.item_type
        else:
            info = next(f.type for f in info.fields if f.encode_name == step)
    return _concrete(info)


def _concrete(info):
    if isinstance(info, mi.UnionType):
        return next(t for t in info.types if not isinstance(t, mi.NoneType))
    return info


def _between(info) -> str:
    if info.ge is not None and info.le is not None:
        return f" between {info.ge:g} and {info.le:g}"
    if info.ge is not None:
        return f" of at least {info.ge:g}"
    return "" if info.le is None else f" of at most {info.le:g}"


def _rule(info, value) -> str:
    if isinstance(info, mi.IntType):
        return f"must be an integer{_between(info)}"
    if isinstance(info, mi.FloatType):
        return f"must be a number{_between(info)}"
    if isinstance(info, mi.BoolType):
        return "must be true or false"
    if isinstance(info, mi.StrType):
        low, high = info.min_length or 0, info.max_length
        if isinstance(value, str) and low <= len(value) <= (high or len(value)):
            if info.pattern in (p.NO_CONTROL, p.NO_NUL):
                return "contains control characters"
            return f"{value[:100]!r} is not well formed"
        return f"must be a string of {low} to {high} characters" if high else "must be a string"
    if isinstance(info, mi.ListType):
        if isinstance(value, list) and info.max_length is not None and len(value) > info.max_length:
            return f"has {len(value)} entries; at most {info.max_length} are allowed"
        if isinstance(value, list):
            return f"must hold {info.min_length or 0} to {info.max_length} entries"
        return "must be a list"
    if isinstance(info, mi.DictType) and isinstance(value, dict):
        return f"has {len(value)} entries; at most {info.max_length} are allowed"
    return "must be an object"
