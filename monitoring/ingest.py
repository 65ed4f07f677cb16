"""The ingest service: what the agent consumer calls for samples, off the event loop.

``store_many`` writes the checked samples frames of many connections in one
transaction, skipping records an earlier connection already stored (dedupe by host,
boot_id and seq), so a frame replayed after a lost ack is acknowledged again but never
stored twice; the frames' current readings are handed to the live fan-out once they
are attributed, before the write. Side jobs live in their own modules: the inventory
(``inventory``, the hello), GPU events and their alerts (``gpu_events``), late samples
and rollups (``rollup_marks``); alert rules on readings are ``alerts.Watch``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from audit.services import record_event
from instances.models import Gpu, GpuHold, GpuSlice, Host

from . import alerts, gpu_events, partitions, readings, rollup_marks
from .agent import protocol
from .catalog import RAW_METRICS, UNSIGNED_64, to_signed
from .frames import Hello, Samples
from .inventory import HelloResult
from .models import AgentSession, AgentState

SAMPLE_COLUMNS = ("time", "gpu_id", "slice_id", "instance_id", "team_id", "procs", *RAW_METRICS)


def connected(*, host: Host, hello: Hello, result: HelloResult, peer: str = "") -> None:
    with transaction.atomic():
        now = timezone.now()
        AgentState.objects.update_or_create(
            host=host,
            defaults={"connected": True, "connected_at": now, "last_seen_at": now, "boot_id": hello.boot_id,
                      "agent": hello.agent[:80], "backend": hello.backend[:20]},
        )
        AgentSession.objects.get_or_create(host=host, boot_id=hello.boot_id)
        record_event(
            actor=host, action="agent.connect", target=host,
            details={"boot_id": hello.boot_id, "agent": hello.agent, "backend": hello.backend,
                     "gpus": len(hello.gpus), "registered": result.registered[:50],
                     "vanished": result.vanished[:50], "peer": peer},
        )
        alerts.resolve_key(f"agent_silent:{host.name}", why="the agent connected")


def disconnected(*, host_id: int) -> None:
    AgentState.objects.filter(host_id=host_id).update(connected=False)


def count_bad_frame(*, host_id: int, message: str) -> None:
    AgentState.objects.filter(host_id=host_id).update(bad_frames=F("bad_frames") + 1, last_error=message[:300])


# --- samples ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """A GPU or slice of the host, as the inventory knows it (no attribution)."""

    gpu_uuid: str
    gpu_id: int
    slice_id: int | None
    index: int


@dataclass(frozen=True)
class Hold:
    start: datetime
    end: datetime | None
    instance_id: int
    team_id: int


class Holds:
    """Who held each device of a host over a span of time, read from ``GpuHold`` for
    every write: a reading belongs to the hold whose [start, end) contains its own
    time, so nothing read before a handover reaches the next holder, however late it
    arrives."""

    def __init__(self, rows):
        self.by_device: dict[tuple[int, int | None], list[Hold]] = {}
        for gpu_id, slice_id, start, end, instance_id, team_id in rows:
            self.by_device.setdefault((gpu_id, slice_id), []).append(Hold(start, end, instance_id, team_id))

    @classmethod
    def read_many(cls, host_ids: set[int], first: datetime, last: datetime) -> dict[int, Holds]:
        """{host id: its holds over [first, last]}: one query for all the hosts of a flush."""
        rows = (
            GpuHold.objects.filter(gpu__host_id__in=host_ids, start__lte=last)
            .filter(Q(end__isnull=True) | Q(end__gt=first))
            .values_list("gpu__host_id", "gpu_id", "slice_id", "start", "end", "instance_id", "team_id")
        )
        by_host: dict[int, list] = {}
        for host_id, *row in rows:
            by_host.setdefault(host_id, []).append(row)
        return {host_id: cls(host_rows) for host_id, host_rows in by_host.items()}

    def team_ids(self) -> set[int]:
        return {hold.team_id for holds in self.by_device.values() for hold in holds}

    def at(self, device: Device, when: datetime) -> tuple[int | None, int | None]:
        for hold in self.by_device.get((device.gpu_id, device.slice_id), ()):
            if hold.start <= when and (hold.end is None or when < hold.end):
                return hold.instance_id, hold.team_id
        return None, None


NO_HOLDS = Holds(())


def refresh_s() -> float:
    return float(getattr(settings, "INGEST_REFRESH_S", 1.0))


def max_skew_s() -> float:
    return float(getattr(settings, "TELEMETRY_MAX_SKEW_S", 120))


class Link:
    """What one agent connection keeps between writes.

    - the host's GPUs and slices (inventory only: who holds them is read per write,
      see ``Holds``), re-read at most every ``INGEST_REFRESH_S`` (1 s);
    - each agent session's high mark as this connection last wrote it (the database
      decides when another connection moved it, see ``_advance``);
    - the newest reading per GPU and the agent's counters, written at most every
      ``INGEST_REFRESH_S`` and on disconnect, so a backlog of frames costs one
      latest-state write per second, not one per frame.
    """

    def __init__(self, host_id: int, host_name: str):
        self.host_id = host_id
        self.host_name = host_name
        self.high: dict[str, tuple[int, int]] = {}  # boot_id -> (session id, high)
        self.latest: dict[str, dict] = {}
        self.counts = {"frames": 0, "samples": 0, "duplicates": 0}
        self._devices: dict[str, Device] = {}
        self._read_at = -math.inf
        self._kept_at = -math.inf
        self.watch = alerts.Watch(host_id, host_name)

    def devices(self) -> dict[str, Device]:
        if time.monotonic() - self._read_at >= refresh_s():
            self._devices = self._read_devices()
            self._read_at = time.monotonic()
        return self._devices

    def _read_devices(self) -> dict[str, Device]:
        gpus = Gpu.objects.filter(host_id=self.host_id).values_list("uuid", "id", "index")
        slices = GpuSlice.objects.filter(gpu__host_id=self.host_id).values_list("uuid", "gpu__uuid", "gpu_id", "id", "gpu__index")
        out = {uuid: Device(uuid, gpu_id, None, index) for uuid, gpu_id, index in gpus}
        out.update({uuid: Device(gpu_uuid, gpu_id, slice_id, index) for uuid, gpu_uuid, gpu_id, slice_id, index in slices})
        return out

    def keep(self, latest: dict[str, dict], frames: int, samples: int, duplicates: int) -> None:
        for device, entry in latest.items():
            kept = self.latest.get(device)
            if kept is None or entry["_t"] >= kept["_t"]:
                self.latest[device] = entry
        self.counts["frames"] += frames
        self.counts["samples"] += samples
        self.counts["duplicates"] += duplicates

    def due(self) -> bool:
        return time.monotonic() - self._kept_at >= refresh_s()

    def write_kept(self) -> None:
        """Write the newest readings and the counters (inside the caller's transaction)."""
        _upsert_latest(self.host_id, self.latest)
        counts = self.counts
        AgentState.objects.filter(host_id=self.host_id).update(
            last_seen_at=timezone.now(), frames=F("frames") + counts["frames"],
            samples=F("samples") + counts["samples"], duplicates=F("duplicates") + counts["duplicates"],
        )
        self.latest = {}
        self.counts = dict.fromkeys(counts, 0)
        self._kept_at = time.monotonic()

    def forget(self) -> None:
        """After a failed write: what this link remembers may be ahead of the database."""
        self.high.clear()
        self.latest = {}
        self.counts = dict.fromkeys(self.counts, 0)
        self._read_at = -math.inf
        self.watch.forget()


@dataclass
class Stored:
    acks: list[tuple[str, int]]  # (boot_id, high) per frame, in order
    stored: int
    duplicates: int
    discarded: int
    latest: dict[str, dict]  # device uuid -> current reading (readings.live)


@dataclass
class Prepared:
    """One connection's frames, attributed and ready to write: what ``prepare`` read
    (devices, holds) and what ``commit`` writes. ``latest`` is published before the write."""

    link: Link
    batches: list[Samples]
    attributed: list[list[tuple]]  # per batch: (record, device, when, instance_id, team_id)
    team_ids: set[int]
    discarded: int
    latest: dict[str, dict]
    ahead: tuple[int, float] | None


def store(*, link: Link, batches: list[Samples]) -> Stored:
    """Write ``batches`` (checked frames of one host, in order) in one transaction.

    Per (host, boot_id) the highest stored seq (``high``) rises in the transaction that
    stores the records under it, so a record is stored exactly once however often it
    is sent. Records of GPUs this host does not have, and events of unknown kinds, are
    acknowledged and discarded (protocol section 3.2).
    """
    return store_many([(link, batches)])[0]


def store_many(items: list[tuple[Link, list[Samples]]], *, publish=None) -> list[Stored | Exception]:
    """Write the frames of many connections in one transaction (one per flush, not one
    per frame); ``publish`` gets the current readings of every frame once they are
    attributed, before the write (readings never wait for their own storage).

    Only frames that passed validation reach here, and every record published is one
    this write stores, discards as unknown (never published) or already holds. When the
    shared transaction fails, each connection's frames are written again on their own,
    so one host's failure fails only that host; a failed connection is not acked.
    """
    prepared = prepare(items)
    if publish is not None:
        publish({uuid: entry for p in prepared for uuid, entry in p.latest.items()})
    try:
        with transaction.atomic():
            return commit(prepared)
    except Exception:
        for p in prepared:
            p.link.forget()
        if len(prepared) == 1:
            raise
    out: list[Stored | Exception] = []
    for p in prepared:
        try:
            with transaction.atomic():
                out += commit([p])
        except Exception as exc:  # noqa: BLE001 (reported to that connection only)
            p.link.forget()
            out.append(exc)
    return out


def prepare(items: list[tuple[Link, list[Samples]]]) -> list[Prepared]:
    """Reads only: each record's device (the host's inventory) and holder at its time."""
    found = [(link, batches, link.devices(), _clamp_future(batches)) for link, batches in items]
    times = [r.t for _, batches, _, _ in found for batch in batches for r in batch.records]
    holds = Holds.read_many({link.host_id for link, *_ in found}, _at(min(times)), _at(max(times)))
    return [_attribute(link, batches, devices, holds.get(link.host_id, NO_HOLDS), ahead)
            for link, batches, devices, ahead in found]


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def _attribute(link: Link, batches: list[Samples], devices: dict[str, Device], holds: Holds, ahead) -> Prepared:
    attributed, newest = [], {}
    discarded = 0
    for batch in batches:
        kept = []
        for record in batch.records:
            device_uuid = record.slice or record.gpu
            device = devices.get(device_uuid)
            if device is None or device.gpu_uuid != record.gpu:
                discarded += 1
                continue
            when = _at(record.t)
            instance_id, team_id = holds.at(device, when)
            kept.append((record, device, when, instance_id, team_id))
            if not record.event:
                last = newest.get(device_uuid)
                if last is None or record.t >= last[0].t:
                    newest[device_uuid] = (record, device, instance_id, team_id)
        attributed.append(kept)
    latest = {
        uuid: readings.live(uuid=uuid, host_id=link.host_id, host=link.host_name, device=device, t=record.t,
                            m=record.m, instance=instance_id, team=team_id)
        for uuid, (record, device, instance_id, team_id) in newest.items()
    }
    return Prepared(link, batches, attributed, holds.team_ids(), discarded, latest, ahead)


def commit(prepared: list[Prepared]) -> list[Stored]:
    """The writes of ``prepare``'d frames, inside the caller's transaction. Hosts go in
    one order (by id), so two flushes never wait on each other's rows in a cycle."""
    rows, out = [], {}
    oldest_t = None
    for p in sorted(prepared, key=lambda p: p.link.host_id):
        stored, oldest = _commit_one(p, rows)
        out[id(p)] = stored
        if oldest is not None and (oldest_t is None or oldest < oldest_t):
            oldest_t = oldest
    insert_samples(rows)
    rollup_marks.note_late(oldest_t)
    for p in prepared:
        link = p.link
        link.watch.apply()
        if p.ahead:
            _note_clock_ahead(link.host_id, *p.ahead)
        link.keep(p.latest, len(p.batches), out[id(p)].stored, out[id(p)].duplicates)
        if link.due():
            link.write_kept()
    return [out[id(p)] for p in prepared]


def _commit_one(p: Prepared, rows: list) -> tuple[Stored, float | None]:
    link = p.link
    link.watch.load(link.devices(), p.team_ids)
    events, acks = [], []
    duplicates, discarded, stored = 0, p.discarded, 0
    oldest_t = None
    for batch, kept in zip(p.batches, p.attributed, strict=True):
        high = _advance(link, batch.boot_id, batch.last_seq)
        acks.append((batch.boot_id, link.high[batch.boot_id][1]))
        if batch.first_seq <= high:
            fresh = [k for k in kept if k[0].seq > high]
            repeated = sum(1 for r in batch.records if r.seq <= high)
            duplicates += repeated
            discarded -= repeated - (len(kept) - len(fresh))  # a repeated record is a duplicate only
        else:
            fresh = kept
        for record, device, when, instance_id, team_id in fresh:
            device_uuid = record.slice or record.gpu
            if record.event:
                if record.event.kind in protocol.EVENT_KINDS:
                    events.append((record, device, when, instance_id, team_id))
                    link.watch.event(device_uuid, device, record.t, msgspec.structs.asdict(record.event),
                                     instance_id, team_id)
                else:
                    discarded += 1
                continue
            rows.append(_row(record.m, record.procs, device, when, instance_id, team_id))
            stored += 1
            link.watch.observe(device_uuid, device, record.t, record.m, instance_id, team_id)
            if oldest_t is None or record.t < oldest_t:
                oldest_t = record.t
    gpu_events.store(link.host_id, link.host_name, events)
    return Stored(acks=acks, stored=stored, duplicates=duplicates, discarded=discarded, latest=p.latest), oldest_t


def _clamp_future(batches: list[Samples]) -> tuple[int, float] | None:
    """Readings stamped more than ``TELEMETRY_MAX_SKEW_S`` ahead of this server are
    stored at the time they arrived: a host clock running fast must not park a reading
    in the future, where it would outrank every later one. Returns (count, most s ahead)."""
    now = time.time()
    limit = now + max_skew_s()
    count, most = 0, 0.0
    for batch in batches:
        for record in batch.records:
            if record.t > limit:
                count += 1
                most = max(most, record.t - now)
                record.t = now
    return (count, most) if count else None


def _note_clock_ahead(host_id: int, count: int, ahead_s: float) -> None:
    AgentState.objects.filter(host_id=host_id).update(last_error=(
        f"Host clock ahead: {count} reading(s) stamped up to {ahead_s:.0f} s after this server's time "
        f"(more than {max_skew_s():.0f} s) were stored at the time they arrived. Check NTP on the host."
    )[:300])


def _advance(link: Link, boot_id: str, last_seq: int) -> int:
    """Raise the session's high mark to ``last_seq``; returns the mark before.

    The update names the mark this link last saw, so it is a compare-and-set: when
    another connection of the host moved the mark meanwhile, nothing matches, and the
    mark is read again under a row lock. Either way the session row stays locked until
    this transaction ends, so two connections never store the same record.
    """
    known = link.high.get(boot_id)
    if known is None:
        session, _ = AgentSession.objects.get_or_create(host_id=link.host_id, boot_id=boot_id)
        known = (session.pk, session.last_seq)
    session_id, high = known
    if last_seq > high:
        now = timezone.now()
        moved = not AgentSession.objects.filter(pk=session_id, last_seq=high).update(last_seq=last_seq, last_seen_at=now)
        if moved:
            high = AgentSession.objects.select_for_update().values_list("last_seq", flat=True).get(pk=session_id)
            if last_seq > high:
                AgentSession.objects.filter(pk=session_id).update(last_seq=last_seq, last_seen_at=now)
    link.high[boot_id] = (session_id, max(high, last_seq))
    return high


def flush(link: Link) -> None:
    """Write what the link still keeps (at disconnect)."""
    if link.latest or any(link.counts.values()):
        with transaction.atomic():
            link.write_kept()


_UNSIGNED_AT = [6 + RAW_METRICS.index(name) for name in UNSIGNED_64]


def _row(m: dict, procs, device: Device, when: datetime, instance_id, team_id) -> list:
    row = [
        when, device.gpu_id, device.slice_id, instance_id, team_id,
        None if procs is None or procs is msgspec.UNSET else protocol.encode_procs(procs),
        *[m.get(name) for name in RAW_METRICS],
    ]
    for at in _UNSIGNED_AT:
        if row[at] is not None and row[at] > 2**63 - 1:
            row[at] = to_signed(row[at])
    return row


def _copy_line(row) -> str:
    """One row in COPY's text format: a time, ids, JSON text, then numbers."""
    procs = row[5]
    if procs is None:
        procs = "\\N"
    elif "\\" in procs:
        procs = procs.replace("\\", "\\\\")  # JSON never holds raw tabs or newlines
    head = [row[0].isoformat(), *("\\N" if v is None else str(v) for v in row[1:5]), procs]
    return "\t".join(head + ["\\N" if v is None else str(v) for v in row[6:]]) + "\n"


def insert_samples(rows: list[tuple]) -> None:
    """Append raw rows (SAMPLE_COLUMNS order): COPY on PostgreSQL, executemany elsewhere.

    On PostgreSQL the day partitions the rows need are made first if missing."""
    if not rows:
        return
    table = "monitoring_sample"
    if partitions.partitioned(table):
        partitions.ensure(table, {row[0].astimezone(UTC).date() for row in rows})
    columns = ", ".join(connection.ops.quote_name(c) for c in SAMPLE_COLUMNS)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                copy.write("".join(map(_copy_line, rows)))
            return
        adapt = connection.ops.adapt_datetimefield_value
        marks = ", ".join(["%s"] * len(SAMPLE_COLUMNS))
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES ({marks})", [(adapt(r[0]), *r[1:]) for r in rows]
        )


def _upsert_latest(host_id: int, latest: dict[str, dict]) -> None:
    """One statement; a reading only replaces an older one (replayed backlog never
    overwrites a newer reading)."""
    if not latest:
        return
    adapt = connection.ops.adapt_datetimefield_value
    now = adapt(timezone.now())
    params, groups = [], []
    for uuid, e in latest.items():
        groups.append("(%s, %s, %s, %s, %s, %s, %s, %s, %s)")
        params += [uuid, host_id, e["_gpu_id"], e["_slice_id"], e["instance"], e["team"],
                   adapt(datetime.fromtimestamp(e["_t"], tz=UTC)), now, json.dumps(e["m"])]
    table = "monitoring_gpulatest"
    newer = f"{table}.time <= excluded.time"
    # last_seen is when the reading shown arrived: staleness is judged on this server's
    # clock, and a reading that is never replaced (stamped ahead, then the host clock
    # was corrected) turns stale. The agent being alive is AgentState.last_seen_at.
    moving = ("host_id", "gpu_id", "slice_id", "instance_id", "team_id", "time", "metrics", "last_seen")
    sets = [f"{c} = CASE WHEN {newer} THEN excluded.{c} ELSE {table}.{c} END" for c in moving]
    sql = (
        f"INSERT INTO {table} (uuid, host_id, gpu_id, slice_id, instance_id, team_id, time, last_seen, metrics) "
        f"VALUES {', '.join(groups)} ON CONFLICT (uuid) DO UPDATE SET {', '.join(sets)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


