"""The look for waiting records after a commit, a moment later and from one thread per
process, so that an audited append costs one statement.

``record_event`` owes one look for pending records after each audited commit (see
``services.seal_pending``: a holder of the chain head looks once it lets go, a writer
that found the head held looks after its own commit, so nothing is left waiting). With
``AUDIT_SEAL_DELAY_MS`` = 0 (the default) the look is made at once, by the committing
thread: one more round trip per audited transaction. With a delay, the commit only wakes
this process's sealer thread, which waits that long (more commits gather meanwhile) and
makes one look for all of them. Every look still comes after the commit that asked for
it, so the rule holds; a pending record is sealed within the delay plus one sealing.
After each look it publishes the signed tree head of what is sealed (``publish``).
At exit the thread is stopped and a last look is made.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time

from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)


def delay_seconds() -> float:
    value = getattr(settings, "AUDIT_SEAL_DELAY_MS", None)
    if value is None:
        value = os.environ.get("AUDIT_SEAL_DELAY_MS", "0")
    return max(0.0, float(value)) / 1000


class Sealer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def request(self) -> None:
        """Ask for a look after this (committed) moment."""
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid, self._stop = os.getpid(), threading.Event()
                self._wake = threading.Event()
                self._thread = threading.Thread(target=self._run, name="audit-sealer", daemon=True)
                self._thread.start()
            self._wake.set()

    def _run(self) -> None:
        from .publish import request as publish
        from .services import seal_pending

        wake, stop = self._wake, self._stop
        try:
            while True:
                wake.wait()
                if stop.is_set():
                    return
                time.sleep(delay_seconds())
                # Requests made before this point are covered by the look below; later
                # ones set the flag again and get a look of their own.
                wake.clear()
                for attempt in (1, 2):
                    try:
                        if delay_seconds():  # without a delay each committer looked itself
                            seal_pending()  # on this thread's own connection, kept between looks
                        publish()  # the signed head of what this look sealed, outside the database
                        break
                    except Exception:  # e.g. the server dropped an idle connection
                        connection.close()  # the next attempt connects afresh
                        if attempt == 2:  # the next request looks again; each signing seals too
                            logger.exception("audit: sealing pending records failed")
        finally:
            connection.close()

    def stop(self) -> None:
        """Stop the thread (its connection closed), then look once more from here."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
            self._wake.set()
        if thread is not None and thread.is_alive():
            thread.join(10)
        from .publish import request as publish
        from .services import seal_pending

        seal_pending()
        publish()


sealer = Sealer()


def _at_exit() -> None:
    if sealer._thread is not None and sealer._pid == os.getpid():
        try:
            sealer.stop()
        except Exception:  # the interpreter is going away; the next signing seals
            logger.exception("audit: last sealing at exit failed")


atexit.register(_at_exit)
