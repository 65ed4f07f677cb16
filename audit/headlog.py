"""Signed tree heads kept outside the database: one JSON line per head, appended to a
file and forced to disk before the writer goes on. No Django import, so the offline
verifier and a witness on another host read the same format.

A line is a head as exports carry it: ``{"chain_hash", "key_fingerprint", "root",
"signature", "time", "tree_size"}``. Several processes append to one file; an exclusive
``flock`` keeps their lines whole.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import signing

FIELDS = ("chain_hash", "key_fingerprint", "root", "signature", "time", "tree_size")
MAX_LINE = 1024  # a head is ~330 bytes; a longer line is not one


def line_of(head: dict, extra: dict | None = None) -> bytes:
    fields = {k: head[k] for k in FIELDS} | (extra or {})
    return (json.dumps(fields, separators=(",", ":"), sort_keys=True) + "\n").encode()


# The descriptors this process holds locked now. A child forked meanwhile (a prefork
# worker) shares their open file and so the lock: it closes its copies at once, or every
# publisher on the host would wait until it exits.
_held: set[int] = set()


def _close_held_in_child() -> None:
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


@contextmanager
def locked(path: str | Path) -> Iterator[int]:
    """The file opened for appending (created if absent) under an exclusive ``flock``,
    held until the block ends: a process may look at the newest head and append the
    next without another appending in between."""
    path = Path(path)
    created = not path.exists()
    if created:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
    _held.add(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if created:  # the new file's directory entry, on disk before any head in it
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        yield fd
    finally:
        _held.discard(fd)
        os.close(fd)  # closing releases the lock


def write_locked(fd: int, head: dict, extra: dict | None = None) -> None:
    """Append ``head`` to the file ``locked`` opened and force it to disk."""
    view = memoryview(line_of(head, extra))
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def append(path: str | Path, head: dict, extra: dict | None = None) -> None:
    """Append ``head`` (with ``extra`` fields: a witness's) and fsync it (and, for a new
    file, its directory entry)."""
    with locked(path) as fd:
        write_locked(fd, head, extra)


class BadLine(ValueError):
    pass


def parse(line: bytes, number: int, *, extra: bool = False) -> dict:
    """One head from one line (``extra``: other fields may follow, as a witness's do);
    BadLine says what is wrong with it."""
    if len(line) > MAX_LINE:
        raise BadLine(f"line {number}: longer than {MAX_LINE} bytes")
    try:
        head = json.loads(line)
    except ValueError:
        raise BadLine(f"line {number}: not JSON") from None
    if not isinstance(head, dict) or not (set(head) >= set(FIELDS) if extra else set(head) == set(FIELDS)):
        raise BadLine(f"line {number}: not a tree head")
    size = head["tree_size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise BadLine(f"line {number}: tree_size must be a positive integer")
    if not all(isinstance(head[k], str) for k in FIELDS if k != "tree_size"):
        raise BadLine(f"line {number}: not a tree head")
    return head


def read(path: str | Path, *, extra: bool = False) -> Iterator[tuple[int, dict | BadLine]]:
    """(line number, head or BadLine) for every line of the file, streamed; nothing
    when the file does not exist."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield number, parse(line, number, extra=extra)
            except BadLine as exc:
                yield number, exc


def newest(path: str | Path, nbytes: int = 64 << 10) -> list[dict]:
    """The heads in the file's last ``nbytes`` (whole lines only; unreadable ones left out)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - nbytes))
            data = handle.read(nbytes)
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    if len(data) == nbytes and size > nbytes:
        lines = lines[1:]  # the first may be cut
    found = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                found.append(parse(line, number))
            except BadLine:
                continue
    return found


def message(head: dict) -> bytes:
    return signing.head_message(head["tree_size"], head["root"], head["chain_hash"], head["time"])
