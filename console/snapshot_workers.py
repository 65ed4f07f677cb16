"""Work spread over forked processes that read what this transaction sees.

``Spread(n, read, work)`` forks ``n`` workers. Each opens its own connection to
PostgreSQL, imports this transaction's snapshot (``pg_export_snapshot``) into a
read-only transaction, runs ``read(part, cursor)`` (``part`` is 0 … n-1, ``cursor`` a
psycopg cursor in that snapshot), closes the connection, and then runs
``work(part, what_read, send)``, where ``send(tag, payload)`` hands bytes back (``tag``
one of the ``tags`` given). So a worker holds a connection only while it reads, and can
wait on a full pipe for as long as the parent is busy. Iterating the ``Spread`` yields ``(tag, payload)`` as they
arrive, from any worker, until every worker is done; an error in a worker is raised
here with its traceback, and leaving the ``with`` block stops any worker still running.
Writing stays with this process and its transaction, so what the workers compute is
stored all or nothing.

A snapshot does not show the transaction's own changes to others, and cannot be taken
inside a savepoint, so workers may only start where the transaction has written and
locked nothing yet, outside any savepoint: ``untouched()`` tells. A worker's reads give
up after ``LOCK_TIMEOUT`` waiting for a lock (this process holds locks the reads could
queue behind, a schema change say, which no deadlock check would see). A worker uses
nothing of Django's connection (it belongs to this process); anything that tries raises.
"""

from __future__ import annotations

import os
import selectors
import signal
import struct
import traceback
from collections.abc import Callable, Iterator

from django.db import DEFAULT_DB_ALIAS, connections

_FRAME = struct.Struct("!BQ")  # tag index, payload length
_DONE, _FAILED = 254, 255
LOCK_TIMEOUT = "60s"
_STOPS = (signal.SIGINT, signal.SIGTERM)


def untouched() -> bool:
    """Whether this transaction could hand its snapshot to workers now: PostgreSQL,
    inside an atomic block but no savepoint, with no row written or locked yet."""
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.vendor != "postgresql" or not connection.in_atomic_block or connection.savepoint_ids:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id_if_assigned() IS NULL")
        return cursor.fetchone()[0]


class WorkerFailed(RuntimeError):
    pass


class Spread:
    def __init__(self, n: int, read: Callable, work: Callable, tags: tuple[str, ...] = ("result",)):
        connection = connections[DEFAULT_DB_ALIAS]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_export_snapshot()")
            snapshot = cursor.fetchone()[0]
        params = connection.get_connection_params()
        params["options"] = f"{params.get('options', '')} -c lock_timeout={LOCK_TIMEOUT}".strip()
        params.setdefault("connect_timeout", 10)
        self.tags = tags
        self._readers: dict[int, tuple[int, bytearray]] = {}  # fd: (pid, what has arrived)
        self._selector = selectors.DefaultSelector()
        try:
            for part in range(n):
                self._fork(part, read, work, snapshot, params)
        except BaseException:
            self.__exit__()  # the workers already started
            raise

    def _fork(self, part: int, read: Callable, work: Callable, snapshot: str, params: dict) -> None:
        out, into = os.pipe()
        # Ctrl-C or a stop request arriving between the fork and the worker's own code
        # would otherwise unwind this process's stack in the worker.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
            os.close(out)
            os.close(into)
            raise
        if pid == 0:  # the worker: never returns
            try:
                for stop in _STOPS:
                    signal.signal(stop, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
                os.close(out)
                for fd in self._readers:  # the earlier workers' pipes
                    os.close(fd)
                self._selector.close()
                self._work(part, read, work, snapshot, params, into)
            finally:
                os._exit(1)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        os.close(into)
        self._readers[out] = (pid, bytearray())
        self._selector.register(out, selectors.EVENT_READ)

    def _work(self, part: int, read: Callable, work: Callable, snapshot: str, params: dict, into: int) -> None:
        status = 0
        try:
            _refuse_django_connection()
            import psycopg
            from psycopg import sql

            def send(tag: str, payload: bytes) -> None:
                _write_all(into, _FRAME.pack(self.tags.index(tag), len(payload)) + payload)

            with psycopg.connect(**params) as conn:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                conn.read_only = True
                with conn.cursor() as cursor:
                    cursor.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(snapshot))
                    what = read(part, cursor)
                conn.rollback()
            work(part, what, send)
            _write_all(into, _FRAME.pack(_DONE, 0))
        except BaseException:
            status = 1
            text = traceback.format_exc().encode()
            try:
                _write_all(into, _FRAME.pack(_FAILED, len(text)) + text)
            except OSError:
                pass
        finally:
            os._exit(status)  # nothing of this process's (its connection, atexit) is touched

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        while self._readers:
            for key, _ in self._selector.select():
                pid, buffer = self._readers[key.fd]
                chunk = os.read(key.fd, 1 << 20)
                buffer += chunk
                done = False
                while len(buffer) >= _FRAME.size and not done:
                    tag, length = _FRAME.unpack_from(buffer)
                    end = _FRAME.size + length
                    if len(buffer) < end:
                        break
                    payload = bytes(buffer[_FRAME.size:end])
                    del buffer[:end]
                    if tag == _FAILED:
                        raise WorkerFailed(f"worker {pid} failed:\n{payload.decode(errors='replace')}")
                    done = tag == _DONE
                    if not done:
                        yield self.tags[tag], payload
                if done:
                    self._finish(key.fd)
                elif not chunk:
                    raise WorkerFailed(f"worker {pid} exited before it was done")

    def _finish(self, fd: int) -> None:
        pid, _ = self._readers.pop(fd)
        self._selector.unregister(fd)
        os.close(fd)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # reaped already (SIGCHLD ignored, say)
            pass

    def __enter__(self) -> Spread:
        return self

    def __exit__(self, *exc) -> None:
        for fd, (pid, _) in list(self._readers.items()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._finish(fd)
        self._selector.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _refuse_django_connection() -> None:
    def refuse(*args, **kwargs):
        raise RuntimeError("a snapshot worker has its own connection; Django's belongs to the process that forked it")

    # Every way Django reaches the socket (a health check's query, a close's goodbye
    # would go out on the connection this process is still using).
    for connection in connections.all(initialized_only=True):
        connection.health_check_done = True
        for name in ("ensure_connection", "_cursor", "is_usable", "close", "_close", "_commit", "_rollback"):
            setattr(connection, name, refuse)
