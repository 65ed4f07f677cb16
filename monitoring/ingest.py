"""The ingest service: what the agent consumer calls for samples, off the event loop.

``store_many`` writes the checked samples frames of many connections in one
transaction, skipping records an earlier connection already stored (dedupe by host,
boot_id and seq), so a frame replayed after a lost ack is acknowledged again but never
stored twice; the frames' current readings are handed to the live fan-out once they
are attributed, before the write. Side jobs live in their own modules: the inventory
(``inventory``, the hello), GPU events and their alerts (``gpu_events``), late samples
and rollups (``rollup_marks``); alert rules on readings are the alerting app's, reached
through ``alert_hooks``.
"""

from __future__ import annotations

import math
import operator
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import msgspec
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from agent import protocol
from audit.recording import record_event
from instances.models import Gpu, GpuHold, GpuSlice, Host

from . import alert_hooks, declarations, gpu_events, partitions, readings, rollup_marks
from .catalog import RAW_METRICS, to_signed
from .frames import Hello, Record, Samples
from .inventory import HelloResult
from .models import AgentSession, AgentState

SAMPLE_COLUMNS = ("time", "gpu_id", "slice_id", "instance_id", "team_id", "procs", *RAW_METRICS)
# The columns of a reading's COPY row: its metrics in the wire schema's order, as
# ``msgspec.structs.astuple`` gives them (the same names as RAW_METRICS).
READING_COLUMNS = (*SAMPLE_COLUMNS[:6], *protocol.Metrics.__struct_fields__)
assert sorted(READING_COLUMNS) == sorted(SAMPLE_COLUMNS), "the wire schema's metrics are the stored ones"
_raw_metrics = operator.attrgetter(*RAW_METRICS)


def connected(*, host: Host, hello: Hello, result: HelloResult, peer: str = "") -> None:
    with transaction.atomic():
        now = timezone.now()
        state = {"connected": True, "connected_at": now, "last_seen_at": now, "boot_id": hello.boot_id,
                 "agent": hello.agent[:80], "backend": hello.backend[:20]}
        # One UPDATE for a host seen before (every reconnect: a worker's whole fleet of
        # agents after a restart), rather than update_or_create's savepoint, locking
        # read and update; the row is made on the host's first connection only.
        if not AgentState.objects.filter(host=host).update(**state):
            AgentState.objects.update_or_create(host=host, defaults=state)
        AgentSession.objects.get_or_create(host=host, boot_id=hello.boot_id)
        record_event(
            actor=host, action="agent.connect", target=host,
            details={"boot_id": hello.boot_id, "agent": hello.agent, "backend": hello.backend,
                     "gpus": len(hello.gpus), "registered": result.registered[:50],
                     "vanished": result.vanished[:50], "peer": peer},
        )
        alert_hooks.resolve(f"agent_silent:{host.name}", why="the agent connected")


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
    model_id: int | None = None


class Held(msgspec.Struct, frozen=True, gc=False):
    """A device and who held it at a reading's time: what the reading's row names.
    ``ids`` is that row's gpu_id, slice_id, instance_id and team_id as COPY text.
    (Not tracked by the garbage collector, as the wire structs are not: a flush holds
    one pair of a record and its holder per reading, and they hold no cycles.)"""

    uuid: str
    device: Device
    instance_id: int | None
    team_id: int | None
    ids: str

    @classmethod
    def of(cls, uuid: str, device: Device, instance_id: int | None, team_id: int | None) -> Held:
        ids = (device.gpu_id, device.slice_id, instance_id, team_id)
        return cls(uuid, device, instance_id, team_id, "\t".join(NULL if v is None else str(v) for v in ids))


NULL = "\\N"  # COPY's text for NULL
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)


def micros(when: datetime) -> int:
    """Microseconds since the epoch: the precision of a stored time."""
    return (when - EPOCH) // ONE_US


def split_t(t: float) -> tuple[int, int]:
    """A reading's time as (seconds, microseconds), rounded as ``datetime.fromtimestamp``
    rounds it (half to even), so the stored time and the holder chosen agree."""
    sec = int(t)
    us = round((t - sec) * 1e6)
    if us >= 1_000_000:
        return sec + 1, us - 1_000_000
    return sec, us


@dataclass(frozen=True)
class Hold:
    start: int  # microseconds since the epoch
    end: int | None
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
            hold = Hold(micros(start), None if end is None else micros(end), instance_id, team_id)
            self.by_device.setdefault((gpu_id, slice_id), []).append(hold)

    @classmethod
    def read_many(cls, host_ids: set[int], first: datetime, last: datetime) -> dict[int, Holds]:
        """{host id: its holds over [first, last]}: one query for all the hosts of a flush."""
        if connection.vendor == "postgresql":  # a few parameters however many hosts (see _values)
            with connection.cursor() as cursor:
                cursor.execute(
                    'SELECT g.host_id, h.gpu_id, h.slice_id, h.start, h."end", h.instance_id, h.team_id '
                    f"FROM {GpuHold._meta.db_table} h JOIN {Gpu._meta.db_table} g ON g.id = h.gpu_id "
                    'WHERE g.host_id = ANY(%s) AND h.start <= %s AND (h."end" IS NULL OR h."end" > %s)',
                    [sorted(host_ids), last, first],
                )
                rows = cursor.fetchall()
        else:
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

    def at(self, device: Device, when: int) -> tuple[int | None, int | None]:
        """The holder at ``when`` (microseconds since the epoch)."""
        for hold in self.by_device.get((device.gpu_id, device.slice_id), ()):
            if hold.start <= when and (hold.end is None or when < hold.end):
                return hold.instance_id, hold.team_id
        return None, None

    def throughout(self, device: Device, first: int, last: int) -> tuple[int | None, int | None] | None:
        """The holder of ``device`` over all of [first, last], or None when it changes within."""
        near = [h for h in self.by_device.get((device.gpu_id, device.slice_id), ())
                if h.start <= last and (h.end is None or first < h.end)]
        if not near:
            return None, None
        hold = near[0]
        if len(near) == 1 and hold.start <= first and (hold.end is None or last < hold.end):
            return hold.instance_id, hold.team_id
        return None


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
        self.latest: dict[str, readings.Live] = {}
        self.counts = {"frames": 0, "samples": 0, "duplicates": 0}
        self._devices: dict[str, Device] = {}
        self._read_at = -math.inf
        self._kept_at = -math.inf
        self.watch = alert_hooks.watch(host_id, host_name)
        self.declared = declarations.Declared(host_id)

    def stale(self) -> bool:
        return time.monotonic() - self._read_at >= refresh_s()

    def devices(self) -> dict[str, Device]:
        if self.stale():
            read_devices([self])
        return self._devices

    def keep(self, latest: dict[str, readings.Live], frames: int, samples: int, duplicates: int) -> None:
        for device, entry in latest.items():
            kept = self.latest.get(device)
            if kept is None or entry.t >= kept.t:
                self.latest[device] = entry
        self.counts["frames"] += frames
        self.counts["samples"] += samples
        self.counts["duplicates"] += duplicates

    def due(self) -> bool:
        return time.monotonic() - self._kept_at >= refresh_s()

    def write_kept(self) -> None:
        """Write the newest readings and the counters (inside the caller's transaction)."""
        write_kept([self])

    def forget(self) -> None:
        """After a failed write: what this link remembers may be ahead of the database."""
        self.high.clear()
        self.latest = {}
        self.counts = dict.fromkeys(self.counts, 0)
        self._read_at = -math.inf
        self.watch.forget()


def read_devices(links: list[Link]) -> None:
    """Re-read the inventory of the hosts of ``links``: two queries for all of them."""
    ids = {link.host_id for link in links}
    found: dict[int, dict[str, Device]] = {host_id: {} for host_id in ids}
    if connection.vendor == "postgresql":  # a few parameters however many hosts (see _values)
        gpu, piece = Gpu._meta.db_table, GpuSlice._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(f'SELECT host_id, uuid, id, "index", model_id FROM {gpu} WHERE host_id = ANY(%s)', [sorted(ids)])
            gpus = cursor.fetchall()
            cursor.execute(f'SELECT g.host_id, s.uuid, g.uuid, s.gpu_id, s.id, g."index", g.model_id FROM {piece} s '
                           f"JOIN {gpu} g ON g.id = s.gpu_id WHERE g.host_id = ANY(%s)", [sorted(ids)])
            slices = cursor.fetchall()
    else:
        gpus = Gpu.objects.filter(host_id__in=ids).values_list("host_id", "uuid", "id", "index", "model_id")
        slices = GpuSlice.objects.filter(gpu__host_id__in=ids).values_list(
            "gpu__host_id", "uuid", "gpu__uuid", "gpu_id", "id", "gpu__index", "gpu__model_id")
    for host_id, uuid, gpu_id, index, model_id in gpus:
        found[host_id][uuid] = Device(uuid, gpu_id, None, index, model_id)
    for host_id, uuid, gpu_uuid, gpu_id, slice_id, index, model_id in slices:
        found[host_id][uuid] = Device(gpu_uuid, gpu_id, slice_id, index, model_id)
    now = time.monotonic()
    for link in links:
        link._devices, link._read_at = found[link.host_id], now


def write_kept(links: list[Link]) -> None:
    """Write the newest readings and the counters of ``links`` (inside the caller's
    transaction): one upsert for every link's readings, one update of their counters."""
    latest: dict[str, tuple[int, readings.Live]] = {}
    counts: dict[int, list[int]] = {}
    for link in sorted(links, key=lambda link: link.host_id):
        for uuid, entry in link.latest.items():
            kept = latest.get(uuid)  # two connections of one host may both hold a GPU's reading
            if kept is None or entry.t >= kept[1].t:
                latest[uuid] = (link.host_id, entry)
        total = counts.setdefault(link.host_id, [0, 0, 0])
        for i, name in enumerate(("frames", "samples", "duplicates")):
            total[i] += link.counts[name]
    _upsert_latest(latest)
    _add_counts(counts)
    now = time.monotonic()
    for link in links:
        link.latest = {}
        link.counts = dict.fromkeys(link.counts, 0)
        link._kept_at = now


@dataclass
class Stored:
    acks: list[tuple[str, int]]  # (boot_id, high) per frame, in order
    stored: int
    duplicates: int
    discarded: int
    latest: dict[str, readings.Live]  # device uuid -> current reading


@dataclass
class Prepared:
    """One connection's frames, attributed and ready to write: what ``prepare`` read
    (devices, holds) and what ``commit`` writes. ``latest`` is published before the write."""

    link: Link
    batches: list[Samples]
    attributed: list[list[tuple[Record, Held]]]  # per batch, the records of known devices
    team_ids: set[int]
    discarded: int
    latest: dict[str, readings.Live]
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
    return write(prepared)


def write(prepared: list[Prepared]) -> list[Stored | Exception]:
    """``store_many``'s write of frames ``prepare`` read (at most one Prepared per
    connection): one transaction, then one per connection when it fails."""
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
    """Reads only: each record's device (the hosts' inventories, re-read together when
    due) and its holder at its time (one query for every host)."""
    stale = [link for link, _ in items if link.stale()]
    if stale:
        read_devices(stale)
    aheads = [_clamp_future(batches) for _, batches in items]
    times = [r.t for _, batches in items for batch in batches for r in batch.records]
    first, last = min(times), max(times)
    holds = Holds.read_many({link.host_id for link, _ in items}, _at(first), _at(last))
    span = (micros(_at(first)), micros(_at(last)))
    return [_attribute(link, batches, holds.get(link.host_id, NO_HOLDS), span, ahead)
            for (link, batches), ahead in zip(items, aheads, strict=True)]


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def _attribute(link: Link, batches: list[Samples], holds: Holds, span: tuple[int, int], ahead) -> Prepared:
    """Each record with its device and holder (records of devices the host does not
    have are discarded), and the newest reading of each device, to publish."""
    devices = link._devices
    known: dict[str, Held | Device | None] = {}  # device uuid -> its holder throughout, or per record
    by_holder: dict[tuple, Held] = {}
    attributed, newest = [], {}
    discarded = 0
    for batch in batches:
        kept, present = [], set()
        for record in batch.records:
            uuid = record.slice or record.gpu
            entry = known.get(uuid, False)
            if entry is False:
                device = entry = devices.get(uuid)
                if device is not None:
                    holder = holds.throughout(device, *span)
                    entry = device if holder is None else Held.of(uuid, device, *holder)
                known[uuid] = entry
            if entry is None:
                discarded += 1
                continue
            if type(entry) is Held:
                if entry.device.gpu_uuid != record.gpu:
                    discarded += 1
                    continue
                held = entry
            else:  # the holder changes within this flush: read it per record
                if entry.gpu_uuid != record.gpu:
                    discarded += 1
                    continue
                sec, us = split_t(record.t)
                holder = holds.at(entry, sec * 1_000_000 + us)
                held = by_holder.get((uuid, *holder))
                if held is None:
                    held = by_holder[(uuid, *holder)] = Held.of(uuid, entry, *holder)
            kept.append((record, held))
            present.add(uuid)
        attributed.append(kept)
        _newest(kept, len(present), newest)
    link.declared.note(newest.values())
    latest = {
        uuid: readings.live(uuid=uuid, host_id=link.host_id, host=link.host_name, device=held.device, t=record.t,
                            m=record.m, instance=held.instance_id, team=held.team_id)
        for uuid, (record, held) in newest.items()
    }
    return Prepared(link, batches, attributed, holds.team_ids(), discarded, latest, ahead)


def _newest(kept: list[tuple[Record, Held]], devices: int, newest: dict[str, tuple[Record, Held]]) -> None:
    """Keep in ``newest`` each device's reading with the latest time (the later one of
    equal times). Readings mostly come in time order: then each of the ``devices``
    devices' last reading is its newest, found from the end."""
    times = [record.t for record, _ in kept]
    if times != sorted(times):
        found = kept
    else:
        found, seen = [], set()
        for pair in reversed(kept):
            if len(seen) == devices:
                break
            record = pair[0]
            uuid = record.slice or record.gpu
            if uuid not in seen and not record.event:
                seen.add(uuid)
                found.append(pair)
        found.reverse()
    for pair in found:
        record = pair[0]
        if not record.event:
            uuid = record.slice or record.gpu
            last = newest.get(uuid)
            if last is None or record.t >= last[0].t:
                newest[uuid] = pair


def commit(prepared: list[Prepared]) -> list[Stored]:
    """The writes of ``prepare``'d frames, inside the caller's transaction: one
    statement per kind of write for all the hosts (high marks, samples, latest
    readings, counters). Hosts go in one order (by id), so two flushes never wait on
    each other's rows in a cycle."""
    ordered = sorted(prepared, key=lambda p: p.link.host_id)
    alert_hooks.load_watches([(p.link.watch, p.link._devices, p.team_ids) for p in ordered])
    highs = _advance_all(ordered)
    readings_: list[tuple[Record, Held]] = []
    out = {}
    oldest_t = None
    for p in ordered:
        stored, oldest = _commit_one(p, highs[id(p)], readings_)
        out[id(p)] = stored
        if oldest is not None and (oldest_t is None or oldest < oldest_t):
            oldest_t = oldest
    copy_readings(readings_)
    rollup_marks.note_late(oldest_t)
    due = []
    for p in ordered:
        link = p.link
        link.watch.apply()
        link.declared.apply()
        if p.ahead:
            _note_clock_ahead(link.host_id, *p.ahead)
        link.keep(p.latest, len(p.batches), out[id(p)].stored, out[id(p)].duplicates)
        if link.due():
            due.append(link)
    if due:
        write_kept(due)
    return [out[id(p)] for p in prepared]


def _commit_one(p: Prepared, highs: list[tuple[int, int]], readings_: list) -> tuple[Stored, float | None]:
    """One connection's records above the high marks: samples go to ``readings_``
    (written together), events are stored, and alert rules see each of them."""
    link = p.link
    watch = link.watch
    observe = watch.observe
    events, acks = [], []
    duplicates, discarded, stored = 0, p.discarded, 0
    oldest_t = None
    for batch, kept, (high, after) in zip(p.batches, p.attributed, highs, strict=True):
        acks.append((batch.boot_id, after))
        if batch.first_seq <= high:
            fresh = [k for k in kept if k[0].seq > high]
            repeated = sum(1 for r in batch.records if r.seq <= high)
            duplicates += repeated
            discarded -= repeated - (len(kept) - len(fresh))  # a repeated record is a duplicate only
        else:
            fresh = kept
        for record, held in fresh:
            if record.event:
                if record.event.kind in protocol.EVENT_KINDS:
                    events.append((record, held.device, _at(record.t), held.instance_id, held.team_id))
                    watch.event(held.uuid, held.device, record.t, msgspec.structs.asdict(record.event),
                                held.instance_id, held.team_id)
                else:
                    discarded += 1
                continue
            readings_.append((record, held))
            stored += 1
            t = record.t
            observe(held.uuid, held.device, t, record.m, held.instance_id, held.team_id)
            if oldest_t is None or t < oldest_t:
                oldest_t = t
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


# --- high marks ----------------------------------------------------------------------------


def _advance_all(prepared: list[Prepared]) -> dict[int, list[tuple[int, int]]]:
    """Raise each agent session's high mark to the last seq of its frames in this flush,
    in one statement for every session; returns, per connection (``id`` of its
    ``Prepared``) and frame, the mark before the frame and after it.

    The statement names the mark the links last saw, so it is a compare-and-set: a
    session another connection of the host moved meanwhile is not updated, and is read
    again under a row lock. Either way each session row raised stays locked until this
    transaction ends, so two connections never store the same record. Connections of
    one host that meet in one flush share the session's mark, in flush order.
    """
    new = {(p.link.host_id, batch.boot_id) for p in prepared for batch in p.batches if batch.boot_id not in p.link.high}
    if new:
        found = _sessions(new)
        for p in prepared:
            for batch in p.batches:
                if batch.boot_id not in p.link.high:
                    p.link.high[batch.boot_id] = found[(p.link.host_id, batch.boot_id)]
    sessions: dict[int, list[int]] = {}  # session id -> [highest mark a link saw, highest last seq]
    for p in prepared:
        for batch in p.batches:
            session_id, seen = p.link.high[batch.boot_id]
            marks = sessions.setdefault(session_id, [seen, 0])
            marks[0] = max(marks[0], seen)
            marks[1] = max(marks[1], batch.last_seq)
    high = {session_id: seen for session_id, (seen, _) in sessions.items()}
    moved = _raise_marks(sorted((sid, seen, last) for sid, (seen, last) in sessions.items() if last > seen))
    if moved:
        high.update(_read_marks_locked(sorted(moved)))
        _raise_marks(sorted((sid, high[sid], sessions[sid][1]) for sid in moved if sessions[sid][1] > high[sid]))
    out: dict[int, list[tuple[int, int]]] = {}
    for p in prepared:
        marks = out[id(p)] = []
        for batch in p.batches:
            session_id = p.link.high[batch.boot_id][0]
            before = high[session_id]
            high[session_id] = after = max(before, batch.last_seq)
            marks.append((before, after))
            p.link.high[batch.boot_id] = (session_id, after)
    return out


def _sessions(wanted: set[tuple[int, str]]) -> dict[tuple[int, str], tuple[int, int]]:
    """{(host id, boot_id): (session id, high mark)} of the sessions the links of a flush
    meet for the first time, made when new: two queries and an insert for all of them."""
    hosts, boots = {h for h, _ in wanted}, {b for _, b in wanted}

    def read() -> dict:
        rows = AgentSession.objects.filter(host_id__in=hosts, boot_id__in=boots)
        return {(h, b): (pk, seq) for h, b, pk, seq in rows.values_list("host_id", "boot_id", "pk", "last_seq")
                if (h, b) in wanted}

    found = read()
    if len(found) < len(wanted):
        AgentSession.objects.bulk_create([AgentSession(host_id=h, boot_id=b) for h, b in sorted(wanted - found.keys())],
                                         ignore_conflicts=True)  # another connection may make one meanwhile
        found = read()
    return found


def _values(rows: list[tuple], names: tuple[str, ...], types: tuple[str, ...]) -> tuple[str, list]:
    """Literal rows as a FROM item named ``v`` with columns ``names``, and its parameters.

    On PostgreSQL one array per column (``unnest``): a statement with a few parameters,
    whose client-side conversion psycopg caches, where a VALUES list would have a
    parameter per value and be parsed again for every flush."""
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%s::{t}[]" for t in types)
        return f"unnest({arrays}) AS v ({', '.join(names)})", [list(column) for column in zip(*rows, strict=True)]
    params = [x for row in rows for x in row]
    one = "(" + ", ".join(["%s"] * len(names)) + ")"
    columns = ", ".join(f"column{i + 1} AS {name}" for i, name in enumerate(names))
    return f"(SELECT {columns} FROM (VALUES {', '.join([one] * len(rows))})) AS v", params


def _raise_marks(rows: list[tuple[int, int, int]]) -> set[int]:
    """Compare-and-set of (session id, mark seen, new mark); returns the sessions whose
    mark was not the one seen (moved by another connection), so not raised."""
    if not rows:
        return set()
    values, params = _values(rows, ("sid", "seen", "new"), ("bigint", "bigint", "bigint"))
    sql = (f"UPDATE monitoring_agentsession SET last_seq = v.new, last_seen_at = %s FROM {values} "
           f"WHERE monitoring_agentsession.id = v.sid AND monitoring_agentsession.last_seq = v.seen "
           f"RETURNING monitoring_agentsession.id")
    with connection.cursor() as cursor:
        cursor.execute(sql, [connection.ops.adapt_datetimefield_value(timezone.now()), *params])
        raised = {row[0] for row in cursor.fetchall()}
    return {row[0] for row in rows} - raised


def _read_marks_locked(session_ids: list[int]) -> dict[int, int]:
    rows = AgentSession.objects.select_for_update().filter(pk__in=session_ids).order_by("pk")
    return dict(rows.values_list("pk", "last_seq"))


def flush(link: Link) -> None:
    """Write what the link still keeps (at disconnect)."""
    if link.latest or any(link.counts.values()):
        with transaction.atomic():
            link.write_kept()


# --- rows ----------------------------------------------------------------------------------

SAMPLE_TABLE = "monitoring_sample"
_SIGNED_MAX = 2**63 - 1
_encode = msgspec.json.Encoder().encode
_DIGITS_AS_0 = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19  # a number of 19 digits or more may be above _SIGNED_MAX
_seconds: dict[int, str] = {}


def _second_text(sec: int) -> str:
    text = _seconds.get(sec)
    if text is None:
        if len(_seconds) > 100_000:
            _seconds.clear()
        text = _seconds[sec] = datetime.fromtimestamp(sec, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return text


def copy_readings(found: list[tuple[Record, Held]]) -> None:
    """Append the readings as raw rows: on PostgreSQL one COPY whose text is built
    straight from the decoded records (the metrics of every row encoded at once), on
    SQLite through ``insert_samples``."""
    if not found:
        return
    if connection.vendor != "postgresql":
        insert_samples([_row(record, held) for record, held in found])
        return
    text, days = copy_text(found)
    if partitions.partitioned(SAMPLE_TABLE):
        partitions.ensure(SAMPLE_TABLE, days)
    columns = ", ".join(connection.ops.quote_name(c) for c in READING_COLUMNS)
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {SAMPLE_TABLE} ({columns}) FROM STDIN") as copy:
        copy.write(text)


def copy_text(found: list[tuple[Record, Held]]) -> tuple[str, set[date]]:
    """COPY text (READING_COLUMNS order) of the readings, and the days they fall on."""
    astuple = msgspec.structs.astuple
    values = [astuple(record.m) for record, _ in found]
    metrics = _encode(values)
    if _LONG_NUMBER in metrics.translate(_DIGITS_AS_0):
        metrics = _encode([_signed(row) for row in values])
    metrics = metrics.decode()[2:-2].replace(",", "\t").replace("null", NULL).split("]\t[")
    lines, seconds, unset = [], set(), msgspec.UNSET
    append, last_t, last_sec, second, when = lines.append, None, None, "", ""
    for (record, held), row in zip(found, metrics, strict=True):
        t = record.t
        if t != last_t:  # the readings of one tick share their time
            last_t = t
            sec, us = split_t(t)
            if sec != last_sec:
                last_sec, second = sec, _second_text(sec)
                seconds.add(sec // 86_400)
            when = f"{second}.{us:06d}+00:00\t"
        procs = record.procs
        if procs is None or procs is unset:
            append(f"{when}{held.ids}\t\\N\t{row}")
        else:
            procs = _encode(procs).decode()
            if "\\" in procs:
                procs = procs.replace("\\", "\\\\")  # JSON never holds raw tabs or newlines
            append(f"{when}{held.ids}\t{procs}\t{row}")
    days = {date(1970, 1, 1) + timedelta(days=d) for d in seconds}
    return "\n".join(lines) + "\n", days


def _signed(row) -> list:
    return [to_signed(v) if v is not None and v > _SIGNED_MAX else v for v in row]


def _row(record: Record, held: Held) -> tuple:
    """A raw row (SAMPLE_COLUMNS order) for ``insert_samples``."""
    procs = record.procs
    return (
        _at(record.t), held.device.gpu_id, held.device.slice_id, held.instance_id, held.team_id,
        None if procs is None or procs is msgspec.UNSET else protocol.encode_procs(procs),
        *_signed(_raw_metrics(record.m)),
    )


def _copy_line(row) -> str:
    """One row in COPY's text format: a time, ids, JSON text, then numbers."""
    procs = row[5]
    if procs is None:
        procs = NULL
    elif "\\" in procs:
        procs = procs.replace("\\", "\\\\")  # JSON never holds raw tabs or newlines
    head = [row[0].isoformat(), *(NULL if v is None else str(v) for v in row[1:5]), procs]
    return "\t".join(head + [NULL if v is None else str(v) for v in row[6:]]) + "\n"


def insert_samples(rows: list[tuple]) -> None:
    """Append raw rows (SAMPLE_COLUMNS order): COPY on PostgreSQL, executemany elsewhere.

    On PostgreSQL the day partitions the rows need are made first if missing."""
    if not rows:
        return
    table = SAMPLE_TABLE
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


# --- latest readings and counters ------------------------------------------------------------


def _upsert_latest(latest: dict[str, tuple[int, readings.Live]]) -> None:
    """{uuid: (host id, reading)} in one statement; a reading only replaces an older one
    (replayed backlog never overwrites a newer reading)."""
    if not latest:
        return
    adapt = connection.ops.adapt_datetimefield_value
    now = adapt(timezone.now())
    table = "monitoring_gpulatest"
    newer = f"{table}.time <= excluded.time"
    # last_seen is when the reading shown arrived: staleness is judged on this server's
    # clock, and a reading that is never replaced (stamped ahead, then the host clock
    # was corrected) turns stale. The agent being alive is AgentState.last_seen_at.
    moving = ("host_id", "gpu_id", "slice_id", "instance_id", "team_id", "time", "metrics", "last_seen")
    sets = [f"{c} = CASE WHEN {newer} THEN excluded.{c} ELSE {table}.{c} END" for c in moving]
    columns = "uuid, host_id, gpu_id, slice_id, instance_id, team_id, time, last_seen, metrics"
    rows = [(uuid, host_id, e.gpu_id, e.slice_id, e.reading.instance, e.reading.team, _time_text(e.t), e.reading.m)
            for uuid, (host_id, e) in sorted(latest.items())]
    if connection.vendor == "postgresql":  # every reading in one JSON parameter (see _values)
        sql = (
            f"INSERT INTO {table} ({columns}) SELECT uuid, host_id, gpu_id, slice_id, instance_id, team_id, "
            f"time, %s, metrics FROM jsonb_to_recordset(%s::jsonb) AS v (uuid text, host_id bigint, "
            f"gpu_id bigint, slice_id bigint, instance_id bigint, team_id bigint, time timestamptz, metrics jsonb) "
            f"ON CONFLICT (uuid) DO UPDATE SET {', '.join(sets)}"
        )
        keys = ("uuid", "host_id", "gpu_id", "slice_id", "instance_id", "team_id", "time", "metrics")
        params = [now, _encode([dict(zip(keys, row, strict=True)) for row in rows]).decode()]
    else:
        groups = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
        sql = f"INSERT INTO {table} ({columns}) VALUES {groups} ON CONFLICT (uuid) DO UPDATE SET {', '.join(sets)}"
        params = [x for *head, when, m in rows
                  for x in (*head, adapt(datetime.fromisoformat(when)), now, _encode(m).decode())]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _time_text(t: float) -> str:
    """A reading's time as text, rounded to the microsecond as ``datetime.fromtimestamp`` rounds."""
    sec, us = split_t(t)
    return f"{_second_text(sec)}.{us:06d}+00:00"


def _add_counts(counts: dict[int, list[int]]) -> None:
    """{host id: [frames, samples, duplicates]} added to each agent's counters, one statement."""
    if not counts:
        return
    rows = [(host_id, *counts[host_id]) for host_id in sorted(counts)]
    values, params = _values(rows, ("hid", "f", "n", "d"), ("bigint", "bigint", "bigint", "bigint"))
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE monitoring_agentstate SET last_seen_at = %s, frames = frames + v.f, samples = samples + v.n, "
            f"duplicates = duplicates + v.d FROM {values} WHERE monitoring_agentstate.host_id = v.hid",
            [now, *params],
        )
