"""Many rows at once. Writing: binary COPY on PostgreSQL (an order of magnitude faster
than a multi-row INSERT with tens of thousands of parameters, and binary so that
timestamps and decimals need no formatting as text), ``bulk_create`` elsewhere.
Values are ones the database takes as is (int, str, Decimal, aware datetime, date,
bool, None), so no model instance is built on the fast path.

Rows are tuples in the order of the attribute names given, every column named (a COPY
leaves the others to the database, which knows no Django defaults). Reading: ``fetch``,
a query's rows in one fetch from the driver."""

from __future__ import annotations

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
        ops = self.connection.ops
        by_name = {f.attname: f for f in self.model._meta.concrete_fields}
        columns = ", ".join(ops.quote_name(by_name[name].column) for name in self.names)
        table = ops.quote_name(self.model._meta.db_table)
        self._cursor = self.connection.cursor()
        # The columns' own types, so that each value is sent in binary as exactly that.
        self._cursor.execute(f"SELECT {columns} FROM {table} LIMIT 0")
        types = [column.type_code for column in self._cursor.description]
        self._copy = self._cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)")
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
