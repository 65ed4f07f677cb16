"""CSV and JSON Lines exports, streamed in chunks straight from a database cursor so
memory stays flat however many events match.

Every export ends with the signed checkpoint that covers it and an end line with the
row count, so a file can be verified offline (``python -m audit.offline_verify``) and a
truncated download is recognisable. Cells are spreadsheet-safe: a value starting with
``= + - @``, tab, CR or ``'`` gets a leading ``'`` (undone by the offline verifier).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from asgiref.sync import sync_to_async

from . import chain
from .models import Checkpoint

COLUMNS = (*chain.FIELDS, "prev_hash", "hash")
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}
ROWS_PER_CHUNK = 2_000
DB_CHUNK = 5_000
# Columns a person or a client can influence (the rest are numbers, hashes, enums).
_TEXT_COLUMNS = frozenset(
    COLUMNS.index(c)
    for c in (
        "actor_id",
        "actor_name",
        "action",
        "target_type",
        "target_id",
        "user_agent",
        "request_id",
    )
)

_ascii_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode


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

    def rows(self) -> Iterator[tuple]:
        return (
            self.queryset.filter(seq__lte=self.through_seq)
            .order_by("seq")
            .values_list(*COLUMNS)
            .iterator(chunk_size=DB_CHUNK)
        )

    def checkpoint_fields(self) -> dict | None:
        cp = self.checkpoint
        if cp is None:
            return None
        return {
            "seq": cp.seq,
            "hash": cp.hash,
            "time": chain.iso_time(cp.time),
            "key_id": cp.key_id,
            "signature": cp.signature,
        }

    def chunks(self) -> Iterator[bytes]:
        return (csv_chunks if self.fmt == "csv" else jsonl_chunks)(self)


def _batches(rows: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    while batch := list(islice(rows, size)):
        yield batch


def csv_values(row: tuple) -> list:
    values = list(row)
    values[1] = chain.iso_time(values[1])
    for i in _TEXT_COLUMNS:
        values[i] = chain.csv_cell(values[i])
    if values[5] is None:
        values[5] = ""
    values[13] = _ascii_json(values[13])
    return values


def csv_chunks(export: Export) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    for batch in _batches(export.rows(), ROWS_PER_CHUNK):
        writer.writerows(map(csv_values, batch))
        yield buffer.getvalue().encode()
        buffer.seek(0)
        buffer.truncate()
    cp = export.checkpoint_fields()
    if cp is not None:
        writer.writerow(
            ["#checkpoint", cp["seq"], cp["hash"], cp["time"], cp["key_id"], cp["signature"]]
        )
    writer.writerow(["#end", export.count, export.through_seq])
    yield buffer.getvalue().encode()


def jsonl_line(row: tuple) -> str:
    record = dict(zip(COLUMNS, row, strict=True))
    record["time"] = chain.iso_time(record["time"])
    record["type"] = "event"
    return _ascii_json(record)


def jsonl_chunks(export: Export) -> Iterator[bytes]:
    header = {
        "type": "export", "format": "gpuconsole-audit/1", "generated_at": export.generated_at,
        "filters": export.filters, "through_seq": export.through_seq, "count": export.count,
        "columns": list(COLUMNS),
    }  # fmt: skip
    yield (_ascii_json(header) + "\n").encode()
    for batch in _batches(export.rows(), ROWS_PER_CHUNK):
        yield ("\n".join(map(jsonl_line, batch)) + "\n").encode()
    tail = []
    cp = export.checkpoint_fields()
    if cp is not None:
        tail.append(_ascii_json({"type": "checkpoint", **cp}))
    tail.append(
        _ascii_json({"type": "end", "count": export.count, "through_seq": export.through_seq})
    )
    yield ("\n".join(tail) + "\n").encode()


async def async_chunks(make: Callable[[], Iterator[bytes]]) -> AsyncIterator[bytes]:
    """For ASGI servers: each chunk is produced on the request's sync thread (where the
    database cursor lives), so the event loop never blocks and nothing is buffered."""
    chunks = await sync_to_async(make)()
    step = sync_to_async(lambda: next(chunks, None))
    while (chunk := await step()) is not None:
        yield chunk
