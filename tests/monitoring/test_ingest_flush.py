"""One flush writes the frames of many connections together: each row as the frame
said, high marks raised once per session, the latest readings and counters of every
host in one statement each, and nothing stored twice however the frames meet."""

import json
import time
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from telemetry_wire import BOOT, record, samples

from monitoring import frames, ingest
from monitoring.models import AgentSession, AgentState, GpuLatest, Sample

pytestmark = pytest.mark.django_db

NOW = time.time()


def read(frame: dict) -> frames.Samples:
    return frames.read(json.dumps(frame), now=time.time())


def link(fleet, name: str) -> ingest.Link:
    host = fleet["hosts"][name]
    AgentState.objects.get_or_create(host=host)
    return ingest.Link(host.pk, host.name)


def test_rows_hold_what_the_frame_said(fleet):
    t = 1_796_000_000.1234565  # rounds half to even, as datetime.fromtimestamp does
    procs = [{"pid": 7, "name": "a\\b", "cmd": "run \"x\" \u00e9"}]
    frame = samples([{**record(1, t=t, gpu_util=12.5, energy_mj=2**64 - 1, pcie_tx_bytes=2**63, mem_used=2**40),
                      "procs": procs}, record(2, t=t + 1)])
    [stored] = ingest.store_many([(link(fleet, "h100-a"), [read(frame)])])
    assert stored.stored == 2
    first, second = Sample.objects.order_by("time")
    assert first.time == datetime.fromtimestamp(t, tz=UTC)
    assert (first.gpu_util, first.mem_used, first.energy_mj, first.pcie_tx_bytes) == (
        12.5, 2**40, 2**64 - 1, 2**63)  # stored wrapped into the signed column, read back
    assert first.procs == procs
    assert (second.procs, second.energy_mj, second.gpu_util) == (None, None, 50.0)


def test_many_hosts_in_one_flush(fleet):
    a, b = link(fleet, "h100-a"), link(fleet, "h100-b")
    results = ingest.store_many([
        (a, [read(samples([record(1, t=NOW), record(2, gpu="GPU-h100-a-1", t=NOW)]))]),
        (b, [read(samples([record(1, gpu="GPU-h100-b-0", t=NOW)])), read(samples([record(2, gpu="GPU-h100-b-0", t=NOW + 1)]))]),
    ])
    assert [r.acks for r in results] == [[(BOOT, 2)], [(BOOT, 1), (BOOT, 2)]]
    assert Sample.objects.count() == 4
    assert set(GpuLatest.objects.values_list("uuid", flat=True)) == {"GPU-h100-a-0", "GPU-h100-a-1", "GPU-h100-b-0"}
    assert GpuLatest.objects.get(uuid="GPU-h100-b-0").time == datetime.fromtimestamp(NOW + 1, tz=UTC)
    counts = dict(AgentState.objects.values_list("host__name", "samples"))
    assert (counts["h100-a"], counts["h100-b"]) == (2, 2)
    assert set(AgentSession.objects.values_list("host__name", "last_seq")) == {("h100-a", 2), ("h100-b", 2)}


def test_two_connections_of_one_host_in_one_flush_store_once(fleet):
    first, second = link(fleet, "h100-a"), link(fleet, "h100-a")
    frame = samples([record(1, t=NOW), record(2, t=NOW + 1)])
    results = ingest.store_many([(first, [read(frame)]), (second, [read(frame)])])
    assert [r.acks for r in results] == [[(BOOT, 2)], [(BOOT, 2)]]
    assert sorted((r.stored, r.duplicates) for r in results) == [(0, 2), (2, 0)]
    assert Sample.objects.count() == 2
    assert GpuLatest.objects.get().time == datetime.fromtimestamp(NOW + 1, tz=UTC)


def test_a_mark_moved_by_another_connection_is_read_again(fleet):
    first, second = link(fleet, "h100-a"), link(fleet, "h100-a")
    ingest.store(link=first, batches=[read(samples([record(1, t=NOW)]))])
    ingest.store(link=second, batches=[read(samples([record(1, t=NOW), record(2, t=NOW), record(3, t=NOW)]))])
    # ``first`` still believes the mark is 1: its compare-and-set fails, the mark is read again.
    [again] = ingest.store_many([(first, [read(samples([record(2, t=NOW), record(3, t=NOW), record(4, t=NOW)]))])])
    assert (again.acks, again.stored, again.duplicates) == ([(BOOT, 4)], 1, 2)
    assert Sample.objects.count() == 4
    assert AgentSession.objects.get().last_seq == 4


def queries_of_a_flush(fleet, names) -> tuple[int, int, int]:
    """Queries of a flush of one frame per host: the first of new connections (sessions
    made, rules read, alerts left open looked up), then with every timer fresh, and
    with all due."""
    links = [link(fleet, name) for name in names]
    seq = iter(range(1, 1000))

    def frame(name):
        n = next(seq)
        return read(samples([record(n, gpu=f"GPU-{name}-0", t=NOW + n), record(n + 500, gpu=f"GPU-{name}-1", t=NOW + n)]))

    with CaptureQueriesContext(connection) as new:
        ingest.store_many([(lk, [frame(name)]) for lk, name in zip(links, names, strict=True)])
    with CaptureQueriesContext(connection) as first:
        ingest.store_many([(lk, [frame(name)]) for lk, name in zip(links, names, strict=True)])
    for lk in links:  # every per-connection timer due again: devices, rules, latest readings and counters
        lk._read_at = lk._kept_at = lk.watch.loaded_at = float("-inf")
    with CaptureQueriesContext(connection) as due:
        ingest.store_many([(lk, [frame(name)]) for lk, name in zip(links, names, strict=True)])
    return len(new.captured_queries), len(first.captured_queries), len(due.captured_queries)


def test_a_flush_costs_the_same_queries_for_one_host_or_three(fleet, settings):
    # Timers come due only when the test says so, however slowly a loaded machine runs it.
    settings.INGEST_REFRESH_S = settings.ALERT_RULES_MAX_AGE_S = settings.ALERT_REFRESH_S = 3600
    # Readings stamped at import time turn late (one more query, marking rollups dirty)
    # 30 s on: on a loaded machine that can happen between the two counts.
    settings.ROLLUP_DELAY_S = 10**9
    one = queries_of_a_flush(fleet, ["h100-a"])
    three = queries_of_a_flush(fleet, ["h100-b", "a100-mig", "h200-a"])
    # The process's first flush also makes or looks up today's partition (PostgreSQL).
    assert three[0] <= one[0] and three[1:] == one[1:], (one, three)
