"""Where sampling threads leave their records: numbered, cleaned, encoded, in memory."""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import protocol


class Outbox:
    """Thread-safe queue of encoded records; assigns the seq of each record."""

    def __init__(self, boot_id: str, notify: Callable[[], None] | None = None):
        self.boot_id = boot_id
        self.notify = notify
        self._lock = threading.Lock()
        self._seq = 0
        self._pending: list[tuple[int, str]] = []

    def put(self, records: list[dict]) -> None:
        with self._lock:
            for record in records:
                body = protocol.encode_record(record, self._seq + 1)
                if body is None:
                    continue
                self._seq += 1
                self._pending.append((self._seq, body))
        if self.notify is not None:
            self.notify()

    def put_back(self, rows: list[tuple[int, str]], keep: int) -> int:
        """Return rows that could not be spooled to the front; keep at most `keep` rows
        in all, dropping the oldest. Returns how many were dropped."""
        with self._lock:
            pending = rows + self._pending
            dropped = max(0, len(pending) - keep)
            self._pending = pending[dropped:]
        return dropped

    def take(self) -> list[tuple[int, str]]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    @property
    def last_seq(self) -> int:
        return self._seq

    def __len__(self) -> int:
        return len(self._pending)
