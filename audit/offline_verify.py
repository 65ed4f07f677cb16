"""Verify an exported audit bundle with the public key alone: no Django, no database,
no secret.

    python -m audit.offline_verify audit-events-through-1234.zip --public-key audit.pem
    python -m audit.offline_verify audit-events-through-1234.jsonl --fingerprint 3f9c…
    python -m audit.offline_verify --consistency heads.json --public-key audit.pem

For a bundle (the zip of ``events.csv`` + ``manifest.json``, or the JSON Lines file):
every record hashes to its chain hash and matches the manifest's list (so an edited,
added or missing record is named); consecutive records link; each record's inclusion
proof leads to the signed tree head's Merkle root (RFC 6962); the head's Ed25519
signature is genuine under a trusted key that was in service when it signed. For a
consistency file (``GET /api/v1/audit/consistency/``): both heads are signed and the
later tree extends the earlier one unchanged.

Which key is trusted: ``--public-key FILE`` (a PEM you obtained from the console's
``/api/v1/audit/public-key/``), or ``--fingerprint HEX`` (one of the bundle's keys,
pinned by its fingerprint); with neither, the bundle's own keys, and the verifier says
so. Needs Python, the ``cryptography`` package and the ``audit/`` modules ``chain``,
``merkle``, ``signing`` and this one. Exit code 0 when every check passes, 1 when a
check fails, 2 when the file is not a readable bundle ("INVALID: …").

The input is not trusted to be small: the zip is streamed and each member may expand at
most ``MAX_RATIO`` times its compressed size (a zip bomb is refused before it is read),
the manifest may hold at most ``MAX_MANIFEST_BYTES`` and nest ``MAX_DEPTH`` deep, and a
line at most ``MAX_LINE_BYTES``; memory stays within a few times those bounds however
large or hostile the file.
"""

from __future__ import annotations

import argparse
import binascii
import csv
import gc
import io
import json
import re
import sys
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from hashlib import sha256
from typing import NamedTuple

from audit import chain, merkle, signing

_TEXT = (
    "actor_id", "actor_name", "action", "target_type", "target_id", "user_agent", "request_id",
    "actor_role", "target_name",
)  # fmt: skip
_MAX_PROBLEMS = 20
MAX_MANIFEST_BYTES = 64 << 20  # a filtered bundle's manifest lists ~80 bytes a record
MAX_LINE_BYTES = 4 << 20  # one exported event
MAX_DEPTH = 64  # JSON nesting (a manifest is 4 deep)
MAX_RATIO = 100  # expanded / compressed size of a zip member (CSV of hashes: ~3)


class BundleRefused(ValueError):
    """A bundle too large, too deep or too compressed to read within the bounds."""


@dataclass
class Result:
    events: int = 0
    links_checked: int = 0
    proofs_checked: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    head: dict | None = None
    key: str = ""
    complete: bool = False
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(text)

    @property
    def ok(self) -> bool:
        return not self.problems


# --- reading a bundle ----------------------------------------------------------------
#
# A reader turns each row into a Record: its number, the canonical bytes the chain hashes
# (built straight from the row's text, without parsing ``details``: the bundle carries
# them as their canonical JSON text, and the hash is over exactly those bytes, so any
# other text fails), and the two hashes.


class Record(NamedTuple):
    seq: int
    canonical: bytes
    prev_hash: str
    hash: str


_canonical_text = chain.canonical_text
_HEADER = (*chain.FIELDS, "prev_hash", "hash")
_CSV_TEXT = tuple(_HEADER.index(name) for name in _TEXT)
_DETAILS_AT = ',"details":'
# An exported event line ends with these two keys, in this form (export.jsonl_line).
_TAIL = len(',"prev_hash":"') + 64 + len('","hash":"') + 64 + len('"}')


def _csv_rows(text) -> Iterator[Record]:
    for seq, canonical, prev, digest in _csv_cells(text):
        yield Record(seq, canonical, prev, digest)


def _csv_cells(text) -> Iterator[tuple[int, bytes, str, str]]:
    """(seq, canonical bytes, prev hash, hash) of every row of ``events.csv``: its text,
    or its lines (a stream)."""
    reader = csv.reader(io.StringIO(text, newline="") if isinstance(text, str) else text)
    columns = next(reader, None)
    if columns is None or tuple(columns) != _HEADER:
        raise ValueError("events.csv: unexpected header row")
    width, uncell, quote = len(columns), chain.csv_uncell, chain._quote
    for number, cells in enumerate(reader, 2):
        if len(cells) != width:
            raise ValueError(f"events.csv line {number}: {len(cells)} cells, expected {width}")
        # A spreadsheet-safe cell starts with a quote; the first column is a number, so
        # such a cell always follows a comma.
        for i in _CSV_TEXT:
            if cells[i][:1] == "'":
                cells[i] = uncell(cells[i])
        seq, time, at, aid, an, team, action, tt, tid, outcome, ip, ua, req, role, tname, details, prev, digest = cells  # fmt: skip
        try:
            seq = int(seq)
        except ValueError:
            raise ValueError(f"events.csv line {number}: seq {seq!r} is not a number") from None
        # chain.canonical_str, written out for the walk's sake
        canonical = (
            f'{{"action":{quote(action)},"actor_id":{quote(aid)},"actor_name":{quote(an)},'
            f'{f""""actor_role":{quote(role)},""" if role else ""}"actor_type":{quote(at)},'
            f'"details":{details},"outcome":{quote(outcome)},"request_id":{quote(req)},"seq":{seq},'
            f'"source_ip":{quote(ip) if ip else "null"},"target_id":{quote(tid)},'
            f'{f""""target_name":{quote(tname)},""" if tname else ""}"target_type":{quote(tt)},'
            f'"team_id":{team or "null"},"time":{quote(time)},"user_agent":{quote(ua)}}}'
        ).encode()  # fmt: skip
        yield seq, canonical, prev, digest


# An event line exactly as the console exports it (``export.jsonl_line``): every value is
# already JSON text in the canonical encoding, so the canonical bytes are those texts put
# in key order, with no parsing. Sound because the result is only trusted if it hashes
# to the record's hash: a line the server did not write cannot.
_S = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_EVENT_LINE = re.compile(
    rf'\{{"type":"event","seq":(\d+),"time":({_S}),"actor_type":({_S}),"actor_id":({_S}),'
    rf'"actor_name":({_S}),"team_id":(\d+|null),"action":({_S}),"target_type":({_S}),'
    rf'"target_id":({_S}),"outcome":({_S}),"source_ip":({_S}|null),"user_agent":({_S}),'
    rf'"request_id":({_S}),"actor_role":({_S}),"target_name":({_S}),"details":(.*),'
    rf'"prev_hash":"([0-9a-f]{{64}})","hash":"([0-9a-f]{{64}})"\}}'
)


def _exported_record(line: str) -> Record | None:
    match = _EVENT_LINE.fullmatch(line.rstrip("\r\n"))
    if match is None:
        return None
    seq, t, at, aid, an, team, action, tt, tid, outcome, ip, ua, req, role, tname, details, prev, digest = match.groups()  # fmt: skip
    role = f'"actor_role":{role},' if role != '""' else ""
    tname = f'"target_name":{tname},' if tname != '""' else ""
    canonical = (
        f'{{"action":{action},"actor_id":{aid},"actor_name":{an},{role}"actor_type":{at},'
        f'"details":{details},"outcome":{outcome},"request_id":{req},"seq":{seq},'
        f'"source_ip":{ip},"target_id":{tid},{tname}"target_type":{tt},"team_id":{team},'
        f'"time":{t},"user_agent":{ua}}}'
    ).encode()
    return Record(int(seq), canonical, prev, digest)


def _event_record(line: str, number: int) -> Record:
    fast = _exported_record(line)
    if fast is not None:
        return fast
    try:
        row = loads(line.encode(), f"line {number}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {number} is not JSON: {exc}") from None
    if row.get("type") != "event":
        raise ValueError(f"line {number}: not an event")
    try:
        prev, digest = row["prev_hash"], row["hash"]
        text = line.rstrip("\r\n")
        start = text.find(_DETAILS_AT)
        if start > 0 and text.endswith(f',"prev_hash":"{prev}","hash":"{digest}"}}') and len(prev) == len(digest) == 64:
            details = text[start + len(_DETAILS_AT) : len(text) - _TAIL]
        else:  # written by another tool: encode the details canonically
            details = chain.canonical_details(row["details"])
        canonical = _canonical_text(
            int(row["seq"]), row["time"], row["actor_type"], row["actor_id"], row["actor_name"],
            row["team_id"], row["action"], row["target_type"], row["target_id"], row["outcome"],
            row["source_ip"], row["user_agent"], row["request_id"], row.get("actor_role", ""),
            row.get("target_name", ""), details,
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"line {number}: not an audit event ({exc})") from None
    return Record(int(row["seq"]), canonical, prev, digest)


# An event line as the console writes it (bundle format 3, ``export.jsonl_line``):
# ``{"type":"event",`` + the canonical JSON's fields + ``,"prev_hash":"…","hash":"…"}``, so
# the canonical bytes are a slice of the line between two fixed-width ends.
_LINE_HEAD = b'{"type":"event","action":'
_PREV_KEY = b',"prev_hash":"'
_HASH_KEY = b'","hash":"'
_LINE_TAIL = len(_PREV_KEY) + 64 + len(_HASH_KEY) + 64 + len(b'"}')
_SEQ_KEY = b'"seq":'


def _line_parts(line: bytes, number: int) -> tuple[int, bytes, bytes, bytes] | None:
    """(seq, canonical bytes, prev hash, hash) of one event line, the hashes as the
    line's ASCII bytes; None for a blank line. A line in the console's own form is
    sliced, nothing parsed: sound because the slice counts only if it hashes to the
    record's hash (and ``seq`` is read from that slice, where after the real ``"seq":``
    only plain strings, numbers and null follow, none of which can hold a bare quote).
    Any other line goes through ``_event_record``."""
    end = len(line)
    if line.endswith(b"\n"):
        end -= 2 if line.endswith(b"\r\n") else 1
    tail = end - _LINE_TAIL
    if (
        tail > 16
        and line.startswith(_LINE_HEAD)
        and line.startswith(_PREV_KEY, tail)
        and line.startswith(_HASH_KEY, tail + 78)
        and line.startswith(b'"}', end - 2)
    ):
        canonical = b"{" + line[16:tail] + b"}"
        at = canonical.rfind(_SEQ_KEY)
        digits = canonical[at + 6 : canonical.find(b",", at)]
        if at > 0 and digits.isdigit():
            return int(digits), canonical, line[tail + 14 : tail + 78], line[tail + 88 : end - 2]
    if not line.strip():
        return None
    record = _event_record(line.decode("utf-8"), number)
    return record.seq, record.canonical, record.prev_hash.encode(), record.hash.encode()


def _jsonl_parts(lines) -> Iterator[tuple[int, bytes, bytes, bytes]]:
    """``_line_parts`` of every line, its fast path written out (this is the hot loop)."""
    head, prev_key, hash_key, seq_key, width = _LINE_HEAD, _PREV_KEY, _HASH_KEY, _SEQ_KEY, _LINE_TAIL
    for number, line in enumerate(lines, 2):
        end = len(line) - 1 if line[-1:] == b"\n" else len(line)
        tail = end - width
        if (
            line[end - 1 : end + 1] != b"\r\n"
            and line.startswith(head)
            and line.startswith(prev_key, tail)
            and line.startswith(hash_key, tail + 78)
            and line.startswith(b'"}', end - 2)
            and tail > 16
        ):
            canonical = b"{" + line[16:tail] + b"}"
            at = canonical.rfind(seq_key)
            digits = canonical[at + 6 : canonical.find(b",", at)]
            if at > 0 and digits.isdigit():
                yield int(digits), canonical, line[tail + 14 : tail + 78], line[tail + 88 : end - 2]
                continue
        row = _line_parts(line, number)
        if row is not None:
            yield row


def _jsonl_records(lines) -> Iterator[Record]:
    for seq, canonical, prev, digest in _jsonl_parts(lines):
        yield Record(seq, canonical, prev.decode("latin-1"), digest.decode("latin-1"))


def _csv_parts(text) -> Iterator[tuple[int, bytes, bytes, bytes]]:
    for seq, canonical, prev, digest in _csv_cells(text):
        yield seq, canonical, prev.encode(), digest.encode()


class Bundle(NamedTuple):
    manifest: dict
    kind: str  # "jsonl" (rows: the raw lines) or "csv" (rows: the lines of events.csv)
    rows: Iterator | str

    def records(self) -> Iterator[Record]:
        return _jsonl_records(self.rows) if self.kind == "jsonl" else _csv_rows(self.rows)

    def parts(self) -> Iterator[tuple[int, bytes, bytes, bytes]]:
        return _jsonl_parts(self.rows) if self.kind == "jsonl" else _csv_parts(self.rows)


def read_bundle(path: str) -> Bundle:
    if zipfile.is_zipfile(path):
        bundle = zipfile.ZipFile(path)  # closed with the events' stream, once read
        manifest = loads(_member(bundle, "manifest.json", MAX_MANIFEST_BYTES).read(), "manifest.json")
        if not isinstance(manifest, dict):
            raise ValueError(f"manifest.json is a JSON {type(manifest).__name__}, not the bundle's manifest (an object)")
        events = io.TextIOWrapper(_member(bundle, "events.csv"), encoding="utf-8", newline="")
        return Bundle(manifest, "csv", _bounded_lines(events, "events.csv", closing=bundle))
    handle = open(path, "rb")  # noqa: SIM115 (read lazily below)
    first = b" "
    while first.isspace():
        first = handle.readline(MAX_MANIFEST_BYTES + 1)
    if not first:
        raise ValueError("the file is empty")
    if len(first) > MAX_MANIFEST_BYTES:
        raise BundleRefused(f"the manifest (line 1) is longer than {MAX_MANIFEST_BYTES >> 20} MiB")
    manifest = loads(first, "line 1")
    if not isinstance(manifest, dict) or manifest.get("type") != "manifest":
        raise ValueError("line 1 is not the bundle's manifest")
    return Bundle(manifest, "jsonl", _chunked_lines(handle))


def _member(bundle: zipfile.ZipFile, name: str, limit: int | None = None):
    """A zip member's stream, refused when it would expand too far: more than ``limit``
    bytes, or more than ``MAX_RATIO`` times its compressed size (the stream then stops
    at the size the zip declares: a member that lies about it fails its CRC)."""
    info = bundle.getinfo(name)
    if limit is not None and info.file_size > limit:
        raise BundleRefused(f"{name} expands to {info.file_size:,} bytes, more than {limit:,}")
    if info.file_size > MAX_RATIO * max(info.compress_size, 1024):
        raise BundleRefused(
            f"{name} expands {info.file_size / max(info.compress_size, 1):,.0f} times "
            f"({info.compress_size:,} bytes to {info.file_size:,}): a zip bomb, not an export"
        )
    return bundle.open(info)


def _bounded_lines(stream, what: str, *, first: int = 1, closing=None) -> Iterator:
    """The stream's lines, refused past ``MAX_LINE_BYTES`` (the read stops there)."""
    try:
        number = first
        while line := stream.readline(MAX_LINE_BYTES + 1):
            if len(line) > MAX_LINE_BYTES:
                raise BundleRefused(f"{what} line {number} is longer than {MAX_LINE_BYTES >> 20} MiB")
            yield line
            number += 1
    finally:
        stream.close()
        if closing is not None:
            closing.close()


def _chunked_lines(handle) -> Iterator[bytes]:
    """The file's non-blank lines, each read with a limit (iterating the file would hold
    a whole line however long); a line past ``MAX_LINE_BYTES`` is refused there."""
    with handle:
        for number, line in enumerate(iter(partial(handle.readline, MAX_LINE_BYTES + 1), b""), 2):
            if len(line) > MAX_LINE_BYTES:
                raise BundleRefused(f"the file's line {number} is longer than {MAX_LINE_BYTES >> 20} MiB")
            if not line.isspace():
                yield line


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = bytes.maketrans(b"", b"")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def loads(data: bytes, what: str):
    """JSON, refused when nested deeper than ``MAX_DEPTH`` (json would recurse once a
    level, and a 100,000-deep text exhausts the interpreter's stack)."""
    depth = deepest = 0
    for byte in _STRING.sub(b"", data).translate(_BRACKETS, _NOT_BRACKETS):
        if byte in (91, 123):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    raise BundleRefused(f"{what}: JSON nested deeper than {MAX_DEPTH} levels")
        else:
            depth -= 1
    return json.loads(data)


# --- keys and signatures ---------------------------------------------------------------


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def trusted_keys(
    listed: list[dict], public_pem: str | None, pin: str | None, result: Result
) -> dict:
    """fingerprint -> (public key, valid_from, valid_until) for the keys to trust."""
    by_fp = {k["fingerprint"]: k for k in listed}
    if public_pem:
        fp = signing.fingerprint(public_pem)
        entry = by_fp.get(fp, {})
        return {
            fp: (
                signing.load_public(public_pem),
                _time(entry.get("valid_from")),
                _time(entry.get("valid_until")),
            )
        }
    keys = {}
    for fp, entry in by_fp.items():
        if signing.fingerprint(entry["public_key_pem"]) != fp:
            result.problem(f"the bundle's key {fp[:16]}…: its PEM has another fingerprint")
            continue
        if pin and fp != pin.lower():
            continue
        keys[fp] = (
            signing.load_public(entry["public_key_pem"]),
            _time(entry.get("valid_from")),
            _time(entry.get("valid_until")),
        )
    if pin and not keys:
        result.problem(f"no key in the bundle has the fingerprint {pin}")
    if not public_pem and not pin:
        result.notes.append(
            "trusting the public keys inside the bundle; pin one with --public-key or --fingerprint "
            "(compare with GET /api/v1/audit/public-key/)"
        )
    return keys


def head_signed(head: dict, keys: dict) -> str:
    """'' when the tree head's signature is genuine, else why not."""
    found = keys.get(head.get("key_fingerprint"))
    if found is None:
        return f"signed by key {str(head.get('key_fingerprint'))[:16]}…, which is not a trusted key"
    public, valid_from, valid_until = found
    when = _time(head["time"])
    if valid_until is not None and when > valid_until:
        return f"signed at {head['time']}, after its key was retired ({valid_until.isoformat()})"
    if valid_from is not None and when < valid_from:
        return f"signed at {head['time']}, before its key came into service"
    message = signing.head_message(
        head["tree_size"], head["root"], head["chain_hash"], head["time"]
    )
    return (
        ""
        if signing.verify(public, message, head["signature"])
        else "bad signature (forged, or another key)"
    )


# --- the checks ------------------------------------------------------------------------


def verify_bundle(path: str, *, public_pem: str | None = None, pin: str | None = None) -> Result:
    # The walk makes no reference cycles; with a large manifest alive, the collector's
    # full passes would cost more than the hashing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _verify_bundle(path, public_pem, pin)
    finally:
        if collecting:
            gc.enable()


def _verify_bundle(path: str, public_pem: str | None, pin: str | None) -> Result:
    result = Result()
    bundle = read_bundle(path)
    manifest = bundle.manifest
    head = result.head = manifest.get("tree_head")
    if manifest.get("complete") and head is not None:
        _check_complete(result, bundle.parts(), head)
    else:
        _check_listed(result, manifest, bundle.records())
    if head is None:
        if result.events:
            result.problem("no signed tree head: the records are not tied to a signature")
        return result
    keys = trusted_keys(manifest.get("public_keys", []), public_pem, pin, result)
    result.key = head.get("key_fingerprint", "")
    why = head_signed(head, keys)
    if why:
        result.problem(f"tree head #{head['tree_size']}: {why}")
    if not manifest.get("complete"):
        listed = {int(seq): digest for seq, digest in manifest.get("records", [])}
        _check_inclusion(result, head, listed, manifest.get("nodes", []))
    return result


def _check_listed(result: Result, manifest: dict, rows) -> None:
    """A filtered bundle: every row against the manifest's list of records."""
    listed = {int(seq): digest for seq, digest in manifest.get("records", [])}
    seen: dict[int, str] = {}
    prev: Record | None = None
    for row in rows:
        _check_row(result, row, listed, seen, prev)
        prev = row
    for seq in sorted(set(listed) - set(seen))[:_MAX_PROBLEMS]:
        result.problem(f"#{seq}: listed in the manifest but missing from the file (removed)")
    if manifest.get("count") != len(listed):
        result.problem(f"the manifest lists {len(listed)} records but says {manifest.get('count')}")


_LEAVES_PER_BLOCK = 1 << 14  # a perfect subtree: its root is hashed level by level


def _check_complete(result: Result, rows, head: dict) -> None:
    """The whole log up to the head: the rows are every leaf, in order, so their hashes
    rebuild the signed root (which proves each one's inclusion at once) and the last one
    is the head's chain hash. Leaves are gathered in blocks of a perfect subtree each,
    hashed a level at a time, so memory stays flat however long the log. ``rows`` are
    (seq, canonical bytes, prev hash, hash), the hashes as ASCII hex bytes. The same
    checks as ``_check_row``, written out once for the walk's sake."""
    size = int(head["tree_size"])
    tree = merkle.CompactRange()
    block: list[bytes] = []
    sha, unhex, problem = sha256, binascii.unhexlify, result.problem
    count = events = links = first = 0
    seq = 0
    last = b""
    for seq, canonical, prev, digest in rows:
        events += 1
        if events == 1:
            first = seq
        chained = sha(canonical + prev)
        if chained.hexdigest().encode() == digest:
            raw = chained.digest()
        else:
            problem(f"#{seq}: hash mismatch (the record was edited)")
            try:
                raw = unhex(digest)
            except (binascii.Error, ValueError):
                raw = b""
            if len(raw) != 32:
                raw = bytes(32)  # not a hash at all: already named as a mismatch
        if events > 1:
            if seq <= count:
                problem(f"#{seq}: out of order after #{count}")
            elif seq == count + 1:
                links += 1
                if prev != last:
                    problem(f"#{seq}: does not follow #{count} (broken link)")
        count += 1
        if seq != count:
            problem(f"#{count}: missing from the file (removed)" if seq > count else f"#{seq}: out of place")
            count = seq
        block.append(sha(b"\x00" + raw).digest())
        if len(block) == _LEAVES_PER_BLOCK:
            tree.push_subtree(_LEAVES_PER_BLOCK, merkle.perfect_root(block))
            block = []
        last = digest
    at = 0
    for bit in reversed(range(_LEAVES_PER_BLOCK.bit_length())):  # the rest, as perfect subtrees
        width = 1 << bit
        if len(block) - at >= width:
            tree.push_subtree(width, merkle.perfect_root(block[at : at + width]))
            at += width
    result.events += events
    result.links_checked += links
    if events:
        result.first_seq = first if result.first_seq is None else result.first_seq
        result.last_seq = seq
    if tree.size != size:
        result.problem(
            f"the file holds {tree.size} records, the signed tree head {size}: truncated or padded"
        )
    elif events and last != str(head["chain_hash"]).encode():
        result.problem(
            f"#{size}: its hash differs from the signed tree head's (the record was rewritten)"
        )
    elif tree.root().hex() != head["root"]:
        result.problem(
            f"the records do not rebuild the signed root of tree head #{size} (a record was rewritten)"
        )
    else:
        result.proofs_checked = tree.size
        result.complete = True


def _check_row(result: Result, row: Record, listed: dict | None, seen: dict | None, prev) -> None:
    seq = row.seq
    result.events += 1
    if result.first_seq is None:
        result.first_seq = seq
    result.last_seq = seq
    if seen is not None:
        if seq in seen:
            result.problem(f"#{seq}: appears twice")
        seen[seq] = row.hash
    if sha256(row.canonical + row.prev_hash.encode()).hexdigest() != row.hash:
        result.problem(f"#{seq}: hash mismatch (the record was edited)")
    if listed is None:
        pass
    elif seq not in listed:
        result.problem(f"#{seq}: not listed in the manifest (added)")
    elif listed[seq] != row.hash:
        result.problem(
            f"#{seq}: its hash differs from the manifest's (the record or the manifest was edited)"
        )
    if prev is not None:
        if seq <= prev.seq:
            result.problem(f"#{seq}: out of order after #{prev.seq}")
        elif seq == prev.seq + 1:
            result.links_checked += 1
            if row.prev_hash != prev.hash:
                result.problem(f"#{seq}: does not follow #{prev.seq} (broken link)")


def _check_inclusion(result: Result, head: dict, listed: dict, nodes: list) -> None:
    """Every listed record's inclusion proof at once: the records' leaves and the
    manifest's nodes must rebuild the signed root, each node used only where no listed
    record lies under it (so every record is hashed into the root at its place). Only if
    they do not is each record's own path checked, to name the ones that fail."""
    size, root = int(head["tree_size"]), bytes.fromhex(head["root"])
    beyond = [seq for seq in listed if not 1 <= seq <= size]
    for seq in beyond[:_MAX_PROBLEMS]:
        result.problem(f"#{seq}: beyond the signed tree head #{size}")
    leaves = {
        seq - 1: merkle.event_leaf(digest) for seq, digest in listed.items() if 1 <= seq <= size
    }
    tree = merkle.PartialTree(size, leaves, ((lo, hi, bytes.fromhex(h)) for lo, hi, h in nodes))
    try:
        if tree.root_over(sorted(leaves)) == root:
            result.proofs_checked += len(leaves)
            return
    except KeyError:
        pass  # a node is missing: named record by record below
    for index in sorted(leaves):
        try:
            path = tree.inclusion(index)
        except KeyError as exc:
            result.problem(f"#{index + 1}: its inclusion proof is incomplete ({exc.args[0]})")
            continue
        if merkle.verify_inclusion(index, size, leaves[index], path, root):
            result.proofs_checked += 1
        else:
            result.problem(
                f"#{index + 1}: its inclusion proof does not lead to the signed root of tree head #{size}"
            )


def verify_consistency_file(
    path: str, *, public_pem: str | None = None, pin: str | None = None
) -> Result:
    result = Result()
    with open(path, encoding="utf-8") as handle:
        body = json.load(handle)
    first, second = body["first"], body["second"]
    keys = trusted_keys(body.get("public_keys", []), public_pem, pin, result)
    for head in (first, second):
        why = head_signed(head, keys)
        if why:
            result.problem(f"tree head #{head['tree_size']}: {why}")
    proof = [bytes.fromhex(h) for h in body["proof"]]
    if not merkle.verify_consistency(
        int(first["tree_size"]), int(second["tree_size"]),
        bytes.fromhex(first["root"]), bytes.fromhex(second["root"]), proof,
    ):  # fmt: skip
        result.problem(
            f"tree head #{second['tree_size']} does not extend #{first['tree_size']} (history was rewritten)"
        )
    result.head = second
    return result


# --- command line ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify a GPU Console audit bundle offline.")
    parser.add_argument(
        "path", help="the bundle (.zip or .jsonl), or with --consistency the proof file"
    )
    parser.add_argument("--public-key", metavar="PEM", help="the trusted public key (PEM file)")
    parser.add_argument(
        "--fingerprint", metavar="HEX", help="trust only the bundle's key with this fingerprint"
    )
    parser.add_argument(
        "--consistency", action="store_true", help="the file is a consistency proof"
    )
    args = parser.parse_args(argv)
    try:
        pem = open(args.public_key, encoding="ascii").read() if args.public_key else None  # noqa: SIM115
        check = verify_consistency_file if args.consistency else verify_bundle
        result = check(args.path, public_pem=pem, pin=args.fingerprint)
    except (
        OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, zipfile.BadZipFile, csv.Error,
        EOFError, NotImplementedError, RecursionError, MemoryError, zlib.error,
    ) as exc:
        print(f"INVALID: cannot read {args.path}: {exc}")
        return 2
    for note in result.notes:
        print(f"note: {note}")
    for problem in result.problems:
        print(f"INVALID {problem}")
    verdict = "valid" if result.ok else "INVALID"
    head = result.head
    signed = (
        f"tree head #{head['tree_size']} signed by {head['key_fingerprint'][:16]}…"
        if head
        else "no tree head"
    )
    if args.consistency:
        print(f"summary: {verdict}: consistency {signed}")
    else:
        span = f"#{result.first_seq}..#{result.last_seq}" if result.events else "no events"
        proofs = (
            f"the signed root rebuilt from all {result.proofs_checked} records"
            if result.complete
            else f"{result.proofs_checked} inclusion proofs"
        )
        print(
            f"summary: {verdict}: {result.events} events ({span}), {proofs} and {result.links_checked} links checked, {signed}"
        )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
