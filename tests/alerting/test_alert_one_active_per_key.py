"""Four ingest writers raising the same conditions at once leave one active alert per
key: the database's partial unique index decides, the loser refreshes the winner's."""

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from django.db import IntegrityError, connection, transaction

from alerting import alerts
from alerting.models import Alert, AlertKind

WRITERS, KEYS, ROUNDS = 4, 5, 6


def raise_concurrently() -> list[Exception]:
    start = threading.Barrier(WRITERS)
    errors = []

    def writer(n):
        try:
            start.wait()
            for _ in range(ROUNDS):
                for k in range(KEYS):
                    alerts.raise_alert(AlertKind.TEMPERATURE, alerts.Condition(key=f"race:{k}", message=f"w{n}"))
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def outcome() -> dict:
    rows = Alert.objects.filter(key__startswith="race:").values_list("key", "state", "count")
    return {"rows": sorted((k, s) for k, s, _ in rows), "seen": sum(c for _, _, c in rows)}


EXPECTED = {"rows": [(f"race:{k}", "open") for k in range(KEYS)], "seen": WRITERS * KEYS * ROUNDS}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only")
@pytest.mark.django_db(transaction=True)
def test_four_writers_open_one_alert_per_key_on_postgresql():
    assert raise_concurrently() == []
    assert outcome() == EXPECTED


@pytest.mark.django_db
def test_the_database_refuses_a_second_active_alert_for_a_key():
    Alert.objects.create(kind="temperature", key="k", message="first")
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(kind="temperature", key="k", message="second")
    Alert.objects.filter(key="k").update(state="resolved")
    Alert.objects.create(kind="temperature", key="k", message="after the first resolved")


SQLITE_RUN = textwrap.dedent(
    """
    import django
    django.setup()
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    from test_alert_one_active_per_key import EXPECTED, outcome, raise_concurrently
    errors = raise_concurrently()
    assert errors == [], errors
    assert outcome() == EXPECTED, outcome()
    print("ok")
    """
)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite file database only")
def test_four_writers_open_one_alert_per_key_on_a_sqlite_file(tmp_path):
    # As the console runs: a file with WAL and IMMEDIATE transactions, not the
    # in-memory test database.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {"GPUCONSOLE_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "gpuconsole.settings",
            "INPROCESS_SCHEDULER": "false"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), str(Path.cwd())])
    done = subprocess.run([sys.executable, "-c", SQLITE_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
