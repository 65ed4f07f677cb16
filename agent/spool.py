"""The on-disk spool of records the server has not acknowledged yet.

One SQLite file per host (``<spool-dir>/spool.sqlite3``), rows kept in the order
they were sampled. The file is opened (and SQLite loaded) only once it exists or is
first written: an agent whose records are all acknowledged in time never needs it. Bounded: past ``max_records`` the oldest rows are dropped and
counted. Records survive a restart and are sent, oldest first, under the boot_id
they were sampled with.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .protocol import FRAME_OVERHEAD, MAX_FRAME_BYTES, MAX_RECORDS_PER_FRAME, samples_frame

log = logging.getLogger("gpuconsole.agent")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    boot_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_boot_seq ON records (boot_id, seq);
"""

DROP_WARNING_EVERY_S = 10.0


class SpoolError(Exception):
    pass


@dataclass(frozen=True)
class Batch:
    """A run of consecutive spooled records of one boot_id, ready to send as one frame."""

    boot_id: str
    first_id: int
    last_id: int
    first_seq: int
    last_seq: int
    count: int
    text: str
    spooled: bool = True  # False: taken from memory (first_id and last_id mean nothing)


class Spool:
    def __init__(self, directory: str | os.PathLike, max_records: int = 200_000):
        self.directory = Path(directory)
        self.max_records = max_records
        self.dropped_total = 0
        self._dropped_unreported = 0
        self._last_drop_warning = 0.0
        self._lock = threading.Lock()
        self._db = None
        self._count = 0
        self._path = self.directory / "spool.sqlite3"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lockfile = self._take_lock()
        except OSError as exc:
            raise SpoolError(f"cannot open the spool in {self.directory}: {exc}") from None
        if self._path.exists():
            self._open()

    def _open(self) -> None:
        import sqlite3

        try:
            db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            (self._count,) = db.execute("SELECT COUNT(*) FROM records").fetchone()
        except (OSError, sqlite3.Error) as exc:
            raise SpoolError(f"cannot open the spool in {self.directory}: {exc}") from None
        self._db = db

    def _take_lock(self):
        handle = open(self.directory / "lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise SpoolError(
                f"spool directory {self.directory} is in use by another gpuconsole-agent"
            ) from None
        return handle

    def __len__(self) -> int:
        return self._count

    def append(self, boot_id: str, rows: list[tuple[int, str]]) -> int:
        """Store (seq, body) rows; returns how many old rows were dropped to make room.
        Raises SpoolError (nothing stored) when the file cannot be written."""
        if not rows:
            return 0
        with self._lock:
            if self._db is None:
                self._open()
            import sqlite3

            db = self._db
            try:
                db.execute("BEGIN")
                db.executemany(
                    "INSERT INTO records (boot_id, seq, body) VALUES (?, ?, ?)",
                    [(boot_id, seq, body) for seq, body in rows],
                )
                count = self._count + len(rows)
                dropped = max(0, count - self.max_records)
                if dropped:
                    db.execute(
                        "DELETE FROM records WHERE id IN (SELECT id FROM records ORDER BY id LIMIT ?)",
                        (dropped,),
                    )
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise SpoolError(f"cannot write the spool in {self.directory}: {exc}") from None
            self._count = count - dropped
        if dropped:
            self._note_dropped(dropped)
        return dropped

    def _note_dropped(self, dropped: int) -> None:
        self.dropped_total += dropped
        self._dropped_unreported += dropped
        now = time.monotonic()
        if now - self._last_drop_warning >= DROP_WARNING_EVERY_S:
            log.warning(
                "spool %s is full (%d records): dropped the %d oldest, %d since start",
                self.directory,
                self.max_records,
                self._dropped_unreported,
                self.dropped_total,
            )
            self._dropped_unreported = 0
            self._last_drop_warning = now

    def oldest_batch(
        self, max_records: int = MAX_RECORDS_PER_FRAME, max_bytes: int = MAX_FRAME_BYTES
    ) -> Batch | None:
        """The oldest records of one boot_id that fit in one samples frame."""
        if self._db is None:
            return None
        with self._lock:
            rows = self._db.execute(
                "SELECT id, boot_id, seq, body FROM records ORDER BY id LIMIT ?", (max_records,)
            ).fetchall()
        if not rows:
            return None
        boot_id = rows[0][1]
        budget = max_bytes - FRAME_OVERHEAD
        taken = []
        for row in rows:
            cost = len(row[3]) + (1 if taken else 0)
            if row[1] != boot_id or cost > budget:
                break
            taken.append(row)
            budget -= cost
        if not taken:
            # One record larger than a frame cannot ever be sent: drop it.
            self.drop_ids(rows[0][0], rows[0][0])
            log.error("dropped record seq %d: larger than a frame", rows[0][2])
            return self.oldest_batch(max_records, max_bytes)
        return Batch(
            boot_id=boot_id,
            first_id=taken[0][0],
            last_id=taken[-1][0],
            first_seq=taken[0][2],
            last_seq=taken[-1][2],
            count=len(taken),
            text=samples_frame(boot_id, [row[3] for row in taken]),
        )

    def ack(self, boot_id: str, seq: int) -> int:
        """Forget every record of boot_id with a seq up to and including seq."""
        if self._db is None:
            return 0
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM records WHERE boot_id = ? AND seq <= ?", (boot_id, seq)
            )
            self._count -= cur.rowcount
            return cur.rowcount

    def drop(self, batch: Batch) -> int:
        return self.drop_ids(batch.first_id, batch.last_id)

    def drop_ids(self, first_id: int, last_id: int) -> int:
        if self._db is None:
            return 0
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM records WHERE id BETWEEN ? AND ?", (first_id, last_id)
            )
            self._count -= cur.rowcount
            return cur.rowcount

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
            self._lockfile.close()
