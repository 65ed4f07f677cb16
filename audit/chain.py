"""The chain's arithmetic, with no Django import so an exported file verifies anywhere.

An event's hash is ``SHA-256(canonical JSON of the event ‖ previous hash)``. The canonical
JSON has the keys below in sorted order, no spaces, UTF-8 (no ``\\u`` escapes of
non-ASCII), the time in UTC with microseconds, and ``details`` with its keys sorted. It is
exactly ``json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``;
it is spelled out field by field because verification does this a million times.

The chain names the exact record that was edited, moved or removed; the Merkle tree over
the chain hashes (``audit/merkle.py``) and the Ed25519-signed tree heads
(``audit/signing.py``) let anyone prove a record's place in the log with a public key.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from json.encoder import c_make_encoder
from json.encoder import encode_basestring as _quote  # C-accelerated, ensure_ascii=False

GENESIS_HASH = "0" * 64

# The hashed fields, in the column order used by exports and by ``canonical_row``.
FIELDS = (
    "seq",
    "time",
    "actor_type",
    "actor_id",
    "actor_name",
    "team_id",
    "action",
    "target_type",
    "target_id",
    "outcome",
    "source_ip",
    "user_agent",
    "request_id",
    "actor_role",
    "target_name",
    "details",
)

_sha256 = hashlib.sha256
# json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False), built once:
# the stdlib builds this C encoder anew on every call. No cycle check (details come from
# JSON), NaN allowed as the stdlib's default (record_event turns it into a string first).
_encode = (
    c_make_encoder(None, json.JSONEncoder().default, _quote, None, ":", ",", True, False, True)
    if c_make_encoder
    else None
)
_fallback = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_details(details) -> str:
    """The canonical JSON text of ``details`` (what the database stores, byte for byte)."""
    return "".join(_encode(details, 0)) if _encode else _fallback.encode(details)


def iso_time(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _opt(value) -> str:
    return "null" if value is None else _quote(value)


def _since_v2(name: str, value: str) -> str:
    """``actor_role`` and ``target_name`` came later: hashed only when set, so the events
    written before them keep their hashes."""
    return f'"{name}":{_quote(value)},' if value else ""


def canonical_str(
    seq,
    time: str,
    actor_type: str,
    actor_id: str,
    actor_name: str,
    team_id,
    action: str,
    target_type: str,
    target_id: str,
    outcome: str,
    source_ip: str | None,
    user_agent: str,
    request_id: str,
    actor_role: str,
    target_name: str,
    details_text: str,
) -> bytes:
    """The canonical JSON of one event (text), with ``details`` already as canonical JSON
    text and ``time`` already ``iso_time``-formatted; ``seq``/``team_id`` as ints or digits."""
    return (
        f'{{"action":{_quote(action)},"actor_id":{_quote(actor_id)},'
        f'"actor_name":{_quote(actor_name)},{_since_v2("actor_role", actor_role)}"actor_type":{_quote(actor_type)},'
        f'"details":{details_text},"outcome":{_quote(outcome)},'
        f'"request_id":{_quote(request_id)},"seq":{seq},"source_ip":{_opt(source_ip)},'
        f'"target_id":{_quote(target_id)},{_since_v2("target_name", target_name)}"target_type":{_quote(target_type)},'
        f'"team_id":{"null" if team_id is None else team_id},"time":{_quote(time)},'
        f'"user_agent":{_quote(user_agent)}}}'
    )  # fmt: skip


def canonical_text(*fields) -> bytes:
    """The canonical bytes of one event: ``canonical_str`` encoded as UTF-8."""
    return canonical_str(*fields).encode()


def canonical_row(
    seq: int,
    time: str,
    actor_type: str,
    actor_id: str,
    actor_name: str,
    team_id: int | None,
    action: str,
    target_type: str,
    target_id: str,
    outcome: str,
    source_ip: str | None,
    user_agent: str,
    request_id: str,
    actor_role: str,
    target_name: str,
    details,
) -> bytes:
    """The canonical bytes of one event whose ``details`` is a JSON value."""
    return canonical_text(
        int(seq), time, actor_type, actor_id, actor_name, None if team_id is None else int(team_id), action,
        target_type, target_id, outcome, source_ip, user_agent, request_id, actor_role, target_name,
        canonical_details(details),
    )  # fmt: skip


def link(canonical: bytes, prev_hash: str) -> str:
    return _sha256(canonical + prev_hash.encode()).hexdigest()


def row_hash(row: dict, prev_hash: str) -> str:
    """The hash of an event given as a mapping of FIELDS (time as an ISO string);
    ``actor_role`` and ``target_name`` may be absent (empty), as in the canonical form."""
    return link(canonical_row(*(row.get(f, "") if f in _OPTIONAL else row[f] for f in FIELDS)), prev_hash)


_OPTIONAL = ("actor_role", "target_name")


# --- spreadsheet-safe cells --------------------------------------------------------

# A cell that starts with one of these is a formula to a spreadsheet (= + - @, and tab or
# CR that some strip first). The quote itself is included so that escaping is reversible.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def csv_cell(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA_START) else value


def csv_uncell(value: str) -> str:
    return value[1:] if value.startswith("'") else value
