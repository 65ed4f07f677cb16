"""Eight threads appending at once keep one gap-free, valid chain."""

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from audit_support import on_postgres
from django.db import connection

from audit import recording
from audit.models import AuditEvent
from audit.verification import verify

THREADS, EACH = 8, 15


def write_concurrently(record) -> list[Exception]:
    start = threading.Barrier(THREADS)
    errors = []

    def writer(n):
        try:
            start.wait()
            for i in range(EACH):
                record(actor=f"writer-{n}", action="test.concurrent", details={"i": i})
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_eight_writers_keep_one_valid_chain_on_postgresql():
    assert write_concurrently(recording.record_event) == []
    seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, THREADS * EACH + 1))
    assert verify().valid


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_eight_writers_with_a_seal_delay_keep_one_valid_chain(settings):
    import time

    from audit.sealer import seal_pending, sealer

    settings.AUDIT_SEAL_DELAY_MS = 5  # every append pending, sealed by the sealer threads
    try:
        assert write_concurrently(recording.record_event) == []
        for _ in range(250):
            if not AuditEvent.objects.filter(seq__isnull=True).exists():
                break
            time.sleep(0.02)
    finally:
        sealer.stop()
    assert seal_pending() == 0  # the threads had sealed everything
    seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, THREADS * EACH + 1))
    assert verify().valid


SQLITE_RUN = textwrap.dedent(
    """
    import django
    django.setup()
    from django.core.management import call_command
    call_command("migrate", "audit", verbosity=0)
    from test_audit_concurrent_writers import THREADS, EACH, write_concurrently
    from audit import recording
    from audit.models import AuditEvent
    from audit.verification import verify
    errors = write_concurrently(recording.record_event)
    seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    assert errors == [], errors
    assert seqs == list(range(1, THREADS * EACH + 1)), seqs
    assert verify().valid
    print("ok")
    """
)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite file database only")
def test_eight_writers_keep_one_valid_chain_on_a_sqlite_file(tmp_path):
    # The in-memory test database locks whole tables at once; a real file with WAL and
    # IMMEDIATE transactions is what the console runs on, so the writers use one.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {
        "GPUCONSOLE_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "gpuconsole.settings",
        "INPROCESS_SCHEDULER": "false",
    }
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), str(Path.cwd())])
    done = subprocess.run(
        [sys.executable, "-c", SQLITE_RUN], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
