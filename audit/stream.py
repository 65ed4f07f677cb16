"""Audit rows straight from the database, in sequence order, in the form the chain hashes:
time as its ISO text, details as their stored canonical JSON text. On PostgreSQL they come
through ``COPY … TO STDOUT``, which the server formats in its own process while Python
hashes (a cursor would build a Python datetime and dict per row); elsewhere through the
ORM. The queryset says which rows (filters, tenancy); this module only says how."""

from __future__ import annotations

import re
from collections.abc import Iterator

from django.db import connection
from django.db.models import TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from . import chain

# id, seq, time, actor_type, actor_id, actor_name, team_id, action, target_type, target_id,
# outcome, source_ip, user_agent, request_id, details, prev_hash, hash
COLUMNS = ("id", *chain.FIELDS, "prev_hash", "hash")
TABLE = '"audit_auditevent"'
TIME_SQL = f"""to_char({TABLE}."time" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"""
# Team and address as text, '' for none (neither is ever legitimately empty), so that a
# COPY line holds a backslash only where a value really has one.
_PG_COLUMNS = {
    "time": TIME_SQL,
    "team_id": f"COALESCE({TABLE}.team_id::text, '')",
    "source_ip": f"COALESCE(host({TABLE}.source_ip), '')",
    "details": f"{TABLE}.details::text",
}
_COPY_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_COPY_ESCAPE = re.compile(r"\\(.)")


def rows(queryset) -> Iterator[list]:
    """Rows of COLUMNS for ``queryset`` ordered by seq: id and seq ints, team_id digits or
    None, source_ip text or None, time and details as text."""
    if connection.vendor == "postgresql":
        return _copy_rows(queryset)
    return _orm_rows(queryset)


def pg_select(queryset, columns: dict[str, str]):
    """``queryset`` narrowed to ``columns`` (name → SQL over the event table), compiled."""
    named = {f"_c{i}": RawSQL(sql, ()) for i, sql in enumerate(columns.values())}
    query = queryset.annotate(**named).order_by("seq").values_list(*named)
    return query.query.sql_with_params()


def pg_columns() -> dict[str, str]:
    return {name: _PG_COLUMNS.get(name, f'{TABLE}."{name}"') for name in COLUMNS}


def _unescape(value: str) -> str:
    return _COPY_ESCAPE.sub(lambda m: _COPY_ESCAPES.get(m.group(1), m.group(1)), value)


def _parse(line: bytes) -> list:
    values = line.decode().split("\t")
    if b"\\" in line:
        values = [_unescape(v) for v in values]
    values[0] = int(values[0])
    values[1] = int(values[1])
    if not values[6]:
        values[6] = None
    if not values[11]:
        values[11] = None
    return values


def _copy_rows(queryset) -> Iterator[list]:
    sql, params = pg_select(queryset, pg_columns())
    connection.ensure_connection()
    with (
        connection.connection.cursor() as cursor,
        cursor.copy(f"COPY ({sql}) TO STDOUT", params) as copy,
    ):
        rest = b""
        for block in copy:
            lines = (rest + bytes(block)).split(b"\n")
            rest = lines.pop()
            yield from map(_parse, lines)


def _orm_rows(queryset) -> Iterator[list]:
    names = [n if n != "details" else "details_text" for n in COLUMNS]
    query = (
        queryset.annotate(details_text=Cast("details", TextField()))
        .order_by("seq")
        .values_list(*names)
    )
    iso_time = chain.iso_time
    for row in query.iterator(chunk_size=5_000):
        row = list(row)
        row[2] = iso_time(row[2])
        yield row
