"""Two ingest writers store rows of a day that has no partition yet: the first makes
the day's partition inside its own flush, the second must wait for that flush and
write into the new partition, never into the default one (where PostgreSQL would
refuse its rows once the first commits: "violates partition constraint")."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from telemetry_wire import add_samples, utc

from monitoring import partitions

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="partitions exist on PostgreSQL only"),
    pytest.mark.django_db(transaction=True),
]

DAY = utc(2031, 7, 4, 6, 0, 0)  # a day no other test writes


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def waiting(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [pid])
        return cursor.fetchone()[0] > 0


def rows_in(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return cursor.fetchone()[0]


@pytest.fixture
def gpu(fleet):
    partitions.forget()
    yield fleet["hosts"]["h100-a"].gpus.first()
    with connection.cursor() as cursor:  # the day's partition was committed: drop it
        cursor.execute("SELECT monitoring_drop_partition('monitoring_sample', %s)", [DAY.date()])
    partitions.forget()


def test_a_second_writer_waits_for_the_partition_the_first_is_making(gpu):
    made, second_pid, errors, blocked = threading.Event(), [], [], []

    def first():
        try:
            with transaction.atomic():
                add_samples(gpu, DAY, [{"gpu_util": 1}] * 3)  # makes the day, not committed yet
                made.set()
                deadline = time.monotonic() + 10
                while not blocked and time.monotonic() < deadline:
                    if second_pid and waiting(second_pid[0]):
                        blocked.append(True)  # the second writer waits on this flush's locks
                    else:
                        time.sleep(0.005)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            made.set()
        finally:
            connection.close()

    def second():
        try:
            made.wait(10)
            second_pid.append(backend_pid())
            with transaction.atomic():
                add_samples(gpu, DAY + timedelta(minutes=1), [{"gpu_util": 2}] * 4)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and blocked
    assert rows_in(partitions.name_of("monitoring_sample", DAY.date())) == 7
    assert rows_in("monitoring_sample_default") == 0
