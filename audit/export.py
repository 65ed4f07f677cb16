"""CSV and JSON Lines exports, streamed in chunks straight from the database so memory
stays flat however many events match.

On PostgreSQL the CSV is written by the server itself (``COPY (SELECT …) TO STDOUT WITH
CSV`` over the same filtered, tenant-scoped query), so the API streams at close to COPY's
own rate; elsewhere, and for JSON Lines, Python formats rows from ``audit.stream``.

Every export ends with the signed checkpoint that covers it and an end line with the
row count, so a file can be verified offline (``python -m audit.offline_verify``) and a
truncated download is recognisable. Cells are spreadsheet-safe: a value starting with
``= + - @``, tab, CR or ``'`` gets a leading ``'`` (undone by the offline verifier).
Details are the stored canonical JSON text; one-line fields never hold control
characters (``record_event`` escapes them), so no cell or line is ever split.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from json.encoder import encode_basestring as _quote

from asgiref.sync import sync_to_async
from django.db import connection

from . import chain, stream
from .models import Checkpoint

COLUMNS = (*chain.FIELDS, "prev_hash", "hash")
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}
ROWS_PER_CHUNK = 2_000
CHUNK_BYTES = 256 * 1024
# Columns a person or a client can influence (the rest are numbers, hashes, enums).
TEXT_COLUMNS = (
    "actor_id",
    "actor_name",
    "action",
    "target_type",
    "target_id",
    "user_agent",
    "request_id",
)
_FORMULA_SQL = "('=', '+', '-', '@', E'\\t', E'\\r', '''')"


@dataclass
class Export:
    fmt: str
    queryset: object  # already narrowed to what the user may see and asked for
    through_seq: int
    count: int
    checkpoint: Checkpoint | None
    filters: dict = field(default_factory=dict)
    generated_at: str = ""

    @property
    def filename(self) -> str:
        return f"audit-events-through-{self.through_seq}.{self.fmt}"

    @property
    def rows_queryset(self):
        return self.queryset.filter(seq__lte=self.through_seq)

    def checkpoint_fields(self) -> dict | None:
        cp = self.checkpoint
        if cp is None:
            return None
        return {"seq": cp.seq, "hash": cp.hash, "time": chain.iso_time(cp.time), "key_id": cp.key_id, "signature": cp.signature}  # fmt: skip

    def chunks(self) -> Iterator[bytes]:
        return (csv_chunks if self.fmt == "csv" else jsonl_chunks)(self)


def _batches(rows: Iterator, size: int) -> Iterator[list]:
    while batch := list(islice(rows, size)):
        yield batch


# --- CSV -----------------------------------------------------------------------------


def _csv_line(values: list) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue()


def csv_chunks(export: Export) -> Iterator[bytes]:
    yield _csv_line(COLUMNS).encode()
    body = _pg_csv_body if connection.vendor == "postgresql" else _python_csv_body
    yield from body(export.rows_queryset)
    tail = ""
    cp = export.checkpoint_fields()
    if cp is not None:
        tail += _csv_line(
            ["#checkpoint", cp["seq"], cp["hash"], cp["time"], cp["key_id"], cp["signature"]]
        )
    yield (tail + _csv_line(["#end", export.count, export.through_seq])).encode()


def _pg_csv_body(queryset) -> Iterator[bytes]:
    columns = {name: sql for name, sql in stream.pg_columns().items() if name != "id"}
    for name in TEXT_COLUMNS:
        col = columns[name]
        columns[name] = (
            f"CASE WHEN left({col}, 1) IN {_FORMULA_SQL} THEN '''' || {col} ELSE {col} END"
        )
    sql, params = stream.pg_select(queryset, columns)
    connection.ensure_connection()
    pending, size = [], 0
    with connection.connection.cursor() as cursor, cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", params) as copy:  # fmt: skip
        for block in copy:
            pending.append(bytes(block))
            size += len(block)
            if size >= CHUNK_BYTES:
                yield b"".join(pending)
                pending, size = [], 0
    if pending:
        yield b"".join(pending)


_TEXT_INDEXES = tuple(1 + COLUMNS.index(c) for c in TEXT_COLUMNS)  # stream rows start with id


def _csv_values(row: list) -> list:
    for i in _TEXT_INDEXES:
        row[i] = chain.csv_cell(row[i])
    return row[1:]


def _python_csv_body(queryset) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for batch in _batches(stream.rows(queryset), ROWS_PER_CHUNK):
        writer.writerows(map(_csv_values, batch))
        yield buffer.getvalue().encode()
        buffer.seek(0)
        buffer.truncate()


# --- JSON Lines ----------------------------------------------------------------------


def _opt(value) -> str:
    return "null" if value is None else _quote(value)


def jsonl_line(row: list) -> str:
    _id, seq, t, at, aid, an, team, action, tt, tid, outcome, ip, ua, req, details, prev, digest = (
        row
    )
    return (
        f'{{"type":"event","seq":{seq},"time":{_quote(t)},"actor_type":{_quote(at)},"actor_id":{_quote(aid)},'
        f'"actor_name":{_quote(an)},"team_id":{"null" if team is None else team},"action":{_quote(action)},'
        f'"target_type":{_quote(tt)},"target_id":{_quote(tid)},"outcome":{_quote(outcome)},'
        f'"source_ip":{_opt(ip)},"user_agent":{_quote(ua)},"request_id":{_quote(req)},"details":{details},'
        f'"prev_hash":{_quote(prev)},"hash":{_quote(digest)}}}'
    )  # fmt: skip


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def jsonl_chunks(export: Export) -> Iterator[bytes]:
    header = {
        "type": "export", "format": "gpuconsole-audit/1", "generated_at": export.generated_at,
        "filters": export.filters, "through_seq": export.through_seq, "count": export.count,
        "columns": list(COLUMNS),
    }  # fmt: skip
    yield (_json(header) + "\n").encode()
    for batch in _batches(stream.rows(export.rows_queryset), ROWS_PER_CHUNK):
        yield ("\n".join(map(jsonl_line, batch)) + "\n").encode()
    tail = []
    cp = export.checkpoint_fields()
    if cp is not None:
        tail.append(_json({"type": "checkpoint", **cp}))
    tail.append(_json({"type": "end", "count": export.count, "through_seq": export.through_seq}))
    yield ("\n".join(tail) + "\n").encode()


async def async_chunks(make: Callable[[], Iterator[bytes]]) -> AsyncIterator[bytes]:
    """For ASGI servers: each chunk is produced on the request's sync thread (where the
    database connection lives), so the event loop never blocks and nothing is buffered."""
    chunks = await sync_to_async(make)()
    step = sync_to_async(lambda: next(chunks, None))
    try:
        while (chunk := await step()) is not None:
            yield chunk
    finally:
        await sync_to_async(chunks.close)()
