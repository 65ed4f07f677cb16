"""Export bundles, streamed in chunks straight from the database so memory stays flat
however many events match (only the proof material is held: a hash per exported record).

``format=csv`` is a zip holding ``events.csv`` (plain rows, one per event, nothing else)
and ``manifest.json``; ``format=jsonl`` is one JSON line per event after a first
``{"type":"manifest",…}`` line. The manifest carries the filters, the signed tree head
that covers every exported event, every public key that ever signed (PEM, fingerprint,
validity), each exported record's chain hash, and the tree nodes their inclusion proofs
need, so ``python -m audit.offline_verify`` proves each record is in the log unaltered
with the public key alone, however the export was filtered.

On PostgreSQL the CSV rows are written by the server itself (``COPY (SELECT …) TO STDOUT
WITH CSV``) over the same filtered, tenant-scoped query; elsewhere, and for JSON Lines,
Python formats rows from ``audit.stream``. Cells are spreadsheet-safe: a value starting
with ``= + - @``, tab, CR or ``'`` gets a leading ``'`` (undone by the offline verifier).
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from json.encoder import encode_basestring as _quote

from asgiref.sync import sync_to_async
from django.db import connection

from . import chain, stream

COLUMNS = (*chain.FIELDS, "prev_hash", "hash")
FORMATS = {"csv": "application/zip", "jsonl": "application/x-ndjson; charset=utf-8"}
EXTENSIONS = {"csv": "zip", "jsonl": "jsonl"}
BUNDLE_FORMAT = "gpuconsole-audit-bundle/3"
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
    "actor_role",
    "target_name",
)
_FORMULA_SQL = "('=', '+', '-', '@', E'\\t', E'\\r', '''')"


@dataclass
class Export:
    fmt: str
    queryset: object  # already narrowed to what the user may see and asked for
    through_seq: int
    count: int
    manifest: dict = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"audit-events-through-{self.through_seq}.{EXTENSIONS[self.fmt]}"

    @property
    def rows_queryset(self):
        return self.queryset.filter(seq__lte=self.through_seq)

    def chunks(self) -> Iterator[bytes]:
        return (zip_chunks if self.fmt == "csv" else jsonl_chunks)(self)


def manifest(*, generated_at: str, filters: dict, head: dict | None, keys: list[dict],
             records: list[tuple[int, str]] | None, nodes: list[tuple[int, int, bytes]]) -> dict:  # fmt: skip
    """``records`` None: the export holds the whole log up to the head, whose root the
    records themselves rebuild, so no list is needed (and memory stays flat)."""
    complete = records is None
    return {
        "format": BUNDLE_FORMAT, "generated_at": generated_at, "filters": filters,
        "complete": complete, "count": head["tree_size"] if complete and head else len(records or ()),
        "columns": list(COLUMNS), "tree_head": head, "public_keys": keys,
        "records": [] if complete else records,  # (seq, hash) pairs, written as JSON arrays
        "nodes": [[lo, hi, digest.hex()] for lo, hi, digest in nodes],
    }  # fmt: skip


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


class _Sink:
    """A write-only stream for ``zipfile``: what it writes is taken away chunk by chunk."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.position = 0

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


def zip_chunks(export: Export) -> Iterator[bytes]:
    """events.csv then manifest.json, stored uncompressed (rows stream through as they
    come, and the page counts their lines for its progress bar)."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_STORED) as bundle:
        with bundle.open("events.csv", "w", force_zip64=True) as member:
            for chunk in csv_chunks(export):
                member.write(chunk)
                yield sink.take()
        bundle.writestr("manifest.json", _json(export.manifest))
    yield sink.take()


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


def jsonl_line(row: list) -> str:
    """One event as a JSON line: ``{"type":"event",`` then the event's canonical JSON
    fields in their canonical order and form (so ``actor_role`` and ``target_name`` only
    when set), then ``prev_hash`` and ``hash``. The bytes between the first comma and
    ``,"prev_hash"`` are exactly what the chain hashes, braces aside, so a verifier
    hashes a slice of the line instead of rebuilding it."""
    body = chain.canonical_str(*row[1:17])
    return f'{{"type":"event",{body[1:-1]},"prev_hash":{_quote(row[17])},"hash":{_quote(row[18])}}}'


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def jsonl_chunks(export: Export) -> Iterator[bytes]:
    yield (_json({"type": "manifest", **export.manifest}) + "\n").encode()
    for batch in _batches(stream.rows(export.rows_queryset), ROWS_PER_CHUNK):
        yield ("\n".join(map(jsonl_line, batch)) + "\n").encode()


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
