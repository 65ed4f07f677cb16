"""Rating spread over worker processes (METER_WORKERS): the same rows as rating in one
process, all or nothing when a worker fails, and only where the workers can see what
the transaction sees. The workers read in a snapshot of a committed state, so these
tests commit their data (``transaction=True``) and run on PostgreSQL only."""

import os
import threading
import time
from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
from billing_support import DEC, NOV, at
from django.db import connection, transaction

from billing import meter_runs, metering, price_changes, reservations
from billing.models import Charge, Invoice, Price, UnratedUsage, UsageRecord
from console import bulk, snapshot_workers
from console.models import Team
from instances.models import GpuModel, Instance

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="rating workers run on PostgreSQL only"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def world(play, ops, bob, acme, charlie, globex, fleet):
    """Two teams, every way of pricing: on-demand across days and a price change,
    first-hour and later spot preemptions, reserved whole GPUs (covered, overflowing,
    commitment unused) and a reserved slice, idle capacity, and H200 usage that has
    no price by the time it is metered (held unrated)."""
    h100 = GpuModel.objects.get(name="H100-80GB")
    reservations.purchase_reservation(actor=ops, team=acme, gpu_model=h100, gpu_count=2, term="1y", start=at(2), now=NOV)
    reservations.purchase_reservation(actor=ops, team=globex, gpu_model=h100, gpu_count=1, term="1y", start=at(20),
                                      now=NOV)
    price_changes.set_price(actor=ops, sku="H100-80GB", kind="on_demand", hourly=Decimal("2.50"),
                            effective_from=at(10), now=at(1))
    price_changes.set_price(actor=ops, sku="H100-80GB", kind="idle", hourly=Decimal("0.40"), effective_from=at(1),
                            now=at(1))
    price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly=Decimal("0.90"), now=at(6, 12))
    play(bob, acme, "long", runs=[(at(1, 8), at(4, 9), "stop"), (at(9, 22), at(11, 3, 30), "terminate")], count=4)
    play(bob, acme, "short", runs=[(at(5, 1), at(5, 1, 0, 20), "terminate")])
    play(bob, acme, "spot-early", runs=[(at(6, 2), at(6, 2, 40), "preempt")], pricing="spot")
    play(bob, acme, "spot-late", runs=[(at(6, 2), at(7, 5), "preempt")], pricing="spot", count=2)
    play(bob, acme, "covered", runs=[(at(3, 0), at(8, 0), "terminate")], pricing="reserved", count=3)
    play(bob, acme, "slice", runs=[(at(3, 0), at(3, 10), "terminate")], model="A100-80GB", pricing="reserved",
         slice_profile=fleet["mig"])
    idle = play(charlie, globex, "idle", runs=[(at(12, 0), at(12, 6), "terminate")])
    Instance.objects.filter(pk=idle.pk).update(pricing_model="idle")
    play(charlie, globex, "g-reserved", runs=[(at(21, 0), at(21, 5), "terminate")], pricing="reserved", count=2)
    play(charlie, globex, "g-running", runs=[(at(28, 0), None, "")], model="H200-141GB")
    for team in Team.objects.exclude(pk__in=[acme.pk, globex.pk]):
        assert not Instance.objects.filter(team=team).exists()


def _rows():
    return tuple(
        sorted(map(repr, model.objects.values_list(*names)))
        for model, names in ((Charge, metering.CHARGE_COLUMNS), (UsageRecord, metering.USAGE_COLUMNS),
                             (UnratedUsage, ("team_id", "instance_id", "sku", "period_start", "start", "end", "gpus")))
    ) + (sorted(Invoice.objects.values_list("team_id", "month", "total")),)


def _meter(settings, workers, now=DEC + timedelta(hours=6)):
    settings.METER_WORKERS, settings.METER_WORKERS_FROM = workers, 0
    return meter_runs.meter_window(actor="test", start=NOV, end=DEC + timedelta(days=1), now=now)


def test_spread_rating_writes_the_same_rows_as_rating_in_one_process(world, settings, acme, globex):
    # The H200 price goes after the usage, so that its usage is held unrated.
    Price.objects.filter(sku="H200-141GB").delete()
    one = _meter(settings, 1)
    in_process = _rows()
    assert one.workers == 1 and one.charges and one.unrated
    notes = set(Charge.objects.values_list("note", flat=True))
    assert {metering.FREE_NOTE, metering.MINIMUM_NOTE, metering.OVERFLOW_NOTE, metering.SLICE_NOTE,
            metering.IDLE_NOTE} <= notes
    assert Charge.objects.filter(charge_type="unused_commitment").exists()
    # A number of workers that puts the two teams in different ones.
    n = next(k for k in (3, 2, 4, 5, 7) if acme.pk % k != globex.pk % k)
    spread = _meter(settings, n)
    assert spread.workers == n
    assert (spread.charges, spread.usage_records, spread.unrated, spread.months) == (
        one.charges, one.usage_records, one.unrated, one.months)
    assert _rows() == in_process
    # More workers than teams: the idle ones send nothing and the rows are the same.
    assert _meter(settings, 9).workers == 9
    assert _rows() == in_process


def test_a_transaction_that_has_written_rates_in_its_own_process(world, settings, ops):
    """Workers would not see what the transaction wrote before metering (a snapshot
    leaves out uncommitted changes), so it rates in its own process, and sees it."""
    settings.METER_WORKERS, settings.METER_WORKERS_FROM = 3, 0
    with transaction.atomic():
        price_changes.set_price(actor=ops, sku="H100-80GB", kind="on_demand", hourly=Decimal("9.00"),
                                effective_from=at(25), now=at(2))
        result = meter_runs.meter_window(actor="test", start=NOV, end=DEC, now=DEC)
        assert result.workers == 1
        assert Charge.objects.filter(unit_price=Decimal("9.00")).exists() is False  # no H100 runs after the 25th
        assert Charge.objects.filter(sku="H100-80GB", unit_price=Decimal("2.50")).exists()


def test_a_failing_worker_leaves_what_was_metered_before(world, settings, monkeypatch):
    _meter(settings, 1)
    before = _rows()

    def broken(*args, **kwargs):
        raise ArithmeticError("a rating bug")

    monkeypatch.setattr(metering, "_rate", broken)  # the workers are forked with it
    with pytest.raises(snapshot_workers.WorkerFailed, match="a rating bug"):
        _meter(settings, 3)
    assert _rows() == before


def test_a_worker_may_not_use_djangos_connection(db):
    def read(part, cursor):
        return Team.objects.count()

    with transaction.atomic():
        with snapshot_workers.Spread(1, read, _nothing) as workers:
            with pytest.raises(snapshot_workers.WorkerFailed, match="own connection"):
                list(workers)
        # Nothing went out on this process's connection from the worker.
        assert Team.objects.filter(slug="nobody").count() == 0
        assert snapshot_workers.untouched()


def _nothing(*args):
    pass


def test_a_worker_that_dies_is_reported(db):
    def work(part, what, send):
        if part == 1:
            os._exit(3)
        send("result", b"fine")

    with transaction.atomic(), snapshot_workers.Spread(2, _nothing, work) as workers:
        with pytest.raises(snapshot_workers.WorkerFailed, match="exited before it was done"):
            list(workers)


def test_workers_read_in_the_transactions_snapshot(acme):
    """A change committed elsewhere after the snapshot was taken is not seen."""

    def read(part, cursor):
        time.sleep(0.5)  # long after the rename below is committed
        cursor.execute("SELECT name FROM console_team WHERE id = %s", [acme.pk])
        return cursor.fetchone()[0]

    def work(part, name, send):
        send("result", name.encode())

    with transaction.atomic():
        assert snapshot_workers.untouched()
        with snapshot_workers.Spread(2, read, work) as workers:
            with psycopg.connect(**connection.get_connection_params(), autocommit=True) as elsewhere:
                elsewhere.execute("UPDATE console_team SET name = 'Renamed' WHERE id = %s", [acme.pk])
            seen = list(workers)
        Team.objects.filter(pk=acme.pk).update(slug="acme-2")
        assert not snapshot_workers.untouched()  # it has written: no workers from here on
    assert seen == [("result", acme.name.encode())] * 2
    assert Team.objects.get(pk=acme.pk).name == "Renamed"


def test_a_worker_holds_no_connection_once_it_has_read(db):
    """Rating may wait on a full pipe while this process deletes and writes: by then
    the worker's connection is closed, so no session sits idle in a transaction (which
    ``idle_in_transaction_session_timeout`` would end)."""

    def work(part, what, send):
        send("result", b"read")
        time.sleep(1)

    def sessions():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()")
            return cursor.fetchone()[0]

    with transaction.atomic():
        before = sessions()
        with snapshot_workers.Spread(2, lambda part, cursor: cursor.execute("SELECT 1").fetchone(), work) as workers:
            for arrived, _ in enumerate(workers, start=1):
                if arrived == 2:  # both are rating now (here: sleeping)
                    deadline = time.monotonic() + 0.8  # a closed session's backend takes a moment to go
                    while sessions() != before and time.monotonic() < deadline:
                        time.sleep(0.05)
                    assert sessions() == before


def test_inside_a_savepoint_metering_rates_in_its_own_process(world, settings):
    """No snapshot can be exported from a savepoint (the demo seeds meter inside one)."""
    settings.METER_WORKERS, settings.METER_WORKERS_FROM = 3, 0
    with transaction.atomic():
        with transaction.atomic():
            assert not snapshot_workers.untouched()
            result = meter_runs.meter_window(actor="test", start=NOV, end=DEC, now=DEC)
    assert result.workers == 1 and Charge.objects.exists()


def test_an_encoded_row_must_fill_every_column(db):
    encoder = bulk.Encoder(Team, ("name", "slug"))
    assert encoder.encode([("Initech", "initech")])
    with pytest.raises(ValueError, match="a row of 1 values for the 2 columns"):
        encoder.encode([("Initech",)])


def test_two_metering_runs_of_the_same_days_do_not_bill_twice(play, bob, acme, settings, monkeypatch):
    """The second run waits for the first to commit, then replaces its rows."""
    settings.METER_WORKERS = 1
    play(bob, acme, runs=[(at(3, 0), at(3, 5), "terminate")])
    inside, release = threading.Event(), threading.Event()
    refresh = meter_runs._refresh_affected

    def slow_refresh(result, now):
        if threading.current_thread().name == "first":
            inside.set()
            release.wait(10)
        return refresh(result, now)

    monkeypatch.setattr(meter_runs, "_refresh_affected", slow_refresh)
    done = []

    def run():
        try:
            meter_runs.meter_window(actor="test", start=at(3), end=at(4), now=at(5))
            done.append(threading.current_thread().name)
        finally:
            connection.close()

    first, second = threading.Thread(target=run, name="first"), threading.Thread(target=run, name="second")
    first.start()
    assert inside.wait(10)
    second.start()
    time.sleep(0.5)
    assert done == []  # the second waits for the first
    release.set()
    first.join(10)
    second.join(10)
    assert done == ["first", "second"]
    assert Charge.objects.count() == 1 and UsageRecord.objects.count() == 1
