"""Many rows at once. Writing: binary COPY on PostgreSQL (an order of magnitude faster
than a multi-row INSERT with tens of thousands of parameters, and binary so that
timestamps and decimals need no formatting as text), ``bulk_create`` elsewhere.
Values are ones the database takes as is (int, str, Decimal, aware datetime, date,
bool, None), so no model instance is built on the fast path.

Rows are tuples in the order of the attribute names given, every column named (a COPY
leaves the others to the database, which knows no Django defaults). Reading: ``fetch``,
a query's rows in one fetch from the driver."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from django.core.exceptions import EmptyResultSet
from django.db import DEFAULT_DB_ALIAS, connections

BATCH = 2000


class Writer:
    """``with Writer(model, names) as out: out.write(row)``: rows (tuples of the
    attributes ``names``, in that order) stream to the database as they are written,
    in one COPY, so that the database stores them while the caller computes the next.
    Nothing else can use the connection until the block ends. Elsewhere than on
    PostgreSQL the rows are kept and created in batches at the end."""

    def __init__(self, model, names: Sequence[str]):
        self.model, self.names = model, tuple(names)
        self.connection = connections[DEFAULT_DB_ALIAS]
        self._rows: list[tuple] = []
        self._cursor = self._copy = None

    def __enter__(self) -> Writer:
        if self.connection.vendor != "postgresql":
            self.write = self._rows.append
            return self
        statement, types = _copy_in(self.connection, self.model, self.names)
        self._cursor = self.connection.cursor()
        self._copy = self._cursor.cursor.copy(statement)
        out = self._copy.__enter__()
        out.set_types(types)
        self.write = out.write_row
        return self

    def __exit__(self, *exc) -> None:
        if self._copy is None:
            if exc[0] is None and self._rows:
                self.model.objects.bulk_create(
                    [self.model(**dict(zip(self.names, row, strict=True))) for row in self._rows], batch_size=BATCH)
            return
        try:
            self._copy.__exit__(*exc)
        finally:
            self._cursor.close()


def _copy_in(connection, model, names: Sequence[str]) -> tuple[str, list[int]]:
    """The binary COPY statement for ``names`` of ``model`` and the columns' own types,
    so that each value is sent in binary as exactly that."""
    ops = connection.ops
    by_name = {f.attname: f for f in model._meta.concrete_fields}
    columns = ", ".join(ops.quote_name(by_name[name].column) for name in names)
    table = ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {table} LIMIT 0")
        types = [column.type_code for column in cursor.description]
    return f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)", types


class Encoder:
    """Rows encoded for a binary COPY into ``names`` of ``model`` without the database
    at hand, in another process say: made where the connection is (PostgreSQL only),
    then ``encode(rows)`` anywhere gives bytes that ``copy(chunks)`` writes as they
    are. The values are converted by the connection's own adapters, as ``Writer``'s."""

    _HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)  # signature, flags, no extension
    _TRAILER = struct.pack("!h", -1)
    _NULL = struct.pack("!i", -1)

    def __init__(self, model, names: Sequence[str]):
        from psycopg.adapt import Transformer
        from psycopg.pq import Format

        connection = connections[DEFAULT_DB_ALIAS]
        self.model, self.names = model, tuple(names)
        self.statement, types = _copy_in(connection, model, names)
        self._transformer = Transformer(connection.connection)
        self._transformer.set_dumper_types(types, Format.BINARY)
        self._formats = [Format.BINARY] * len(types)
        self._count = struct.pack("!h", len(types))

    def encode(self, rows) -> bytes:
        out, count, null, length = bytearray(), self._count, self._NULL, struct.Struct("!i").pack
        dump = self._transformer.dump_sequence
        width = len(self.names)
        for row in rows:
            if len(row) != width:  # the driver would not notice
                raise ValueError(f"a row of {len(row)} values for the {width} columns {self.names}")
            out += count
            for value in dump(row, self._formats):
                if value is None:
                    out += null
                else:
                    out += length(len(value))
                    out += value
        return bytes(out)

    def copy(self, chunks) -> None:
        """Write what ``encode`` made, chunk by chunk as ``chunks`` yields them, in one
        COPY on this process's connection."""
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor, cursor.cursor.copy(self.statement) as out:
            out.write(self._HEADER)
            for chunk in chunks:
                out.write(chunk)
            out.write(self._TRAILER)


def copy(model, names: Sequence[str], rows: list[tuple]) -> int:
    """Write ``rows`` (tuples of the attributes ``names``, in that order)."""
    if rows:
        with Writer(model, names) as out:
            for row in rows:
                out.write(row)
    return len(rows)


def fetch(queryset) -> list[tuple]:
    """The rows of a ``values_list`` queryset, all at once. On PostgreSQL they come
    straight from the driver in one fetch (the ORM would fetch a hundred at a time and
    pass each row through its converters, which none of these columns needs; a SUM
    of integers comes back as an exact ``Decimal``); elsewhere through the ORM."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return list(queryset)
    try:
        sql, params = queryset.query.sql_with_params()
    except EmptyResultSet:  # filtered on an empty list
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
