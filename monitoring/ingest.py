"""The ingest service: what the agent consumer calls, off the event loop.

``accept_hello`` reconciles a host's report of its GPUs with the inventory;
``store`` writes checked samples frames in one transaction, skipping records an
earlier connection already stored (dedupe by host, boot_id and seq), so a frame
replayed after a lost ack is acknowledged again but never stored twice.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from audit.services import record_event
from instances import services as instance_services
from instances.models import Gpu, GpuHold, GpuModel, GpuSlice, Host, SliceKind, SliceProfile

from . import alerts, partitions
from .agent import protocol as p
from .catalog import RAW_METRICS, UNSIGNED_64, to_signed
from .frames import GpuInfo, Hello, Samples
from .models import AgentSession, AgentState, AlertKind, EventKind, GpuEvent, RollupCursor

SAMPLE_COLUMNS = ("time", "gpu_id", "slice_id", "instance_id", "team_id", "procs", *RAW_METRICS)
_UNSIGNED = frozenset(UNSIGNED_64)


class Refused(Exception):
    """The hello cannot be accepted: ``code`` and ``close_code`` go to the agent."""

    def __init__(self, close_code: int, code: str, message: str):
        super().__init__(message)
        self.close_code, self.code, self.message = close_code, code, message


# --- hello ----------------------------------------------------------------------------


@dataclass
class HelloResult:
    registered: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)


def accept_hello(*, host: Host, hello: Hello, conflict_code: int) -> HelloResult:
    """Register GPUs the host reports for the first time, flag those it no longer
    reports, and refuse GPUs the inventory places on another host."""
    with transaction.atomic():
        elsewhere = _elsewhere(host, hello)
        if elsewhere:
            _flag_moved(host, elsewhere)
    if elsewhere:
        uuid, other = elsewhere[0]
        raise Refused(conflict_code, "gpu_conflict", f"GPU {uuid} is registered to host {other}, not {host.name}")
    with transaction.atomic():
        return _reconcile(host, hello)


def _elsewhere(host: Host, hello: Hello) -> list[tuple[str, str]]:
    gpu_uuids = [g.uuid for g in hello.gpus]
    slice_uuids = [s.uuid for g in hello.gpus for s in g.slices]
    found = list(Gpu.objects.filter(uuid__in=gpu_uuids).exclude(host=host).values_list("uuid", "host__name"))
    found += list(
        GpuSlice.objects.filter(uuid__in=slice_uuids).exclude(gpu__host=host).values_list("uuid", "gpu__host__name")
    )
    return found


def _flag_moved(host: Host, elsewhere: list[tuple[str, str]]) -> None:
    for uuid, other in elsewhere:
        gpu = Gpu.objects.filter(uuid=uuid).first()
        GpuEvent.objects.create(
            kind=EventKind.MOVED, host=host, gpu=gpu, uuid=uuid,
            message=f"{host.name} reports {uuid}, which the inventory places on {other}.",
            details={"registered_host": other},
        )


def _reconcile(host: Host, hello: Hello) -> HelloResult:
    result = HelloResult()
    known = {g.uuid: g for g in Gpu.objects.filter(host=host).select_related("model")}
    reported = {g.uuid for g in hello.gpus}
    _make_room(host, known, hello)
    for info in hello.gpus:
        gpu = known.get(info.uuid)
        if gpu is None:
            gpu = _register_gpu(host, info)
            result.registered.append(info.uuid)
        else:
            _update_gpu(host, gpu, info)
        _register_slices(host, gpu, info, result)
        alerts.resolve_key(f"gpu_lost:{info.uuid}", why=f"{host.name} reports it again")
    for uuid, gpu in known.items():
        if uuid in reported:
            continue
        result.vanished.append(uuid)
        if alerts.is_active(f"gpu_lost:{uuid}"):
            continue
        GpuEvent.objects.create(
            kind=EventKind.VANISHED, host=host, gpu=gpu, uuid=uuid, instance_id=gpu.instance_id, team_id=gpu.team_id,
            message=f"{host.name} no longer reports {uuid} (GPU {gpu.index}).",
        )
        alerts.raise_alert(AlertKind.GPU_LOST, alerts.Condition(
            key=f"gpu_lost:{uuid}", host_id=host.pk, gpu_id=gpu.pk, uuid=uuid, instance_id=gpu.instance_id,
            team_id=gpu.team_id, message=f"{uuid} (GPU {gpu.index} of {host.name}) is missing from its agent's report.",
        ))
    return result


# NVML indexes are 0-63; a GPU that no longer holds its index waits above them.
PARKED_FROM = 64


def _make_room(host: Host, known: dict[str, Gpu], hello: Hello) -> None:
    """Free every index the hello assigns: a GPU sitting on another GPU's index (it
    moved slot, or vanished and was replaced) is parked above the NVML range first."""
    wanted = {info.index: info.uuid for info in hello.gpus}
    taken = {g.index for g in known.values()}
    for gpu in known.values():
        if wanted.get(gpu.index, gpu.uuid) != gpu.uuid:
            parked = next(i for i in range(PARKED_FROM, 32767) if i not in taken)
            taken.add(parked)
            Gpu.objects.filter(pk=gpu.pk).update(index=parked)
            gpu.index = parked


def _update_gpu(host: Host, gpu: Gpu, info: GpuInfo) -> None:
    changes = {}
    if gpu.index != info.index:
        changes["index"] = (gpu.index, info.index)
    if info.pci_bus_id and gpu.pci_bus_id != info.pci_bus_id:
        changes["pci_bus_id"] = (gpu.pci_bus_id, info.pci_bus_id)
    if gpu.memory_total != info.memory_total:
        changes["memory_total"] = (gpu.memory_total, info.memory_total)
    if not changes:
        return
    Gpu.objects.filter(pk=gpu.pk).update(**{k: new for k, (_, new) in changes.items()})
    record_event(
        actor=host, action="gpu.update", target=gpu,
        details={"host": host.name, "uuid": gpu.uuid, **{k: {"from": a, "to": b} for k, (a, b) in changes.items()}},
    )


def _register_gpu(host: Host, info: GpuInfo) -> Gpu:
    gpu = instance_services.add_gpu(
        actor=host, host=host, index=info.index, uuid=info.uuid,
        model=gpu_model_for(info.name, info.memory_total, info.power_limit_mw, actor=host),
        memory_total=info.memory_total, pci_bus_id=info.pci_bus_id,
    )
    GpuEvent.objects.create(
        kind=EventKind.REGISTERED, host=host, gpu=gpu, uuid=info.uuid,
        message=f"{host.name} reported a new GPU {info.uuid} ({info.name or gpu.model.name}) at index {info.index}.",
    )
    return gpu


def _register_slices(host: Host, gpu: Gpu, info: GpuInfo, result: HelloResult) -> None:
    if not info.slices:
        return
    known = set(GpuSlice.objects.filter(gpu=gpu).values_list("uuid", flat=True))
    for s in info.slices:
        if s.uuid in known:
            continue
        profile = _slice_profile(gpu.model, s.profile or "unknown", s.memory_total, actor=host)
        piece = GpuSlice.objects.create(gpu=gpu, profile=profile, uuid=s.uuid, gpu_instance_id=s.gpu_instance_id)
        record_event(actor=host, action="gpu_slice.register", target=piece,
                     details={"host": host.name, "gpu": gpu.uuid, "uuid": s.uuid, "profile": profile.name})
        result.registered.append(s.uuid)


_FAMILY = re.compile(r"([A-Z]+\d+[A-Z]*)")


def gpu_model_for(name: str, memory_total: int, power_limit_mw: int | None, *, actor="system") -> GpuModel:
    """The catalog model for what NVML calls ``name`` (e.g. "NVIDIA H200"), matched on its
    family and memory size; a model the catalog lacks is registered (audited, unpriced:
    it cannot be launched until an operator prices it)."""
    exact = GpuModel.objects.filter(name=name).first()
    if exact is not None:
        return exact
    gib = memory_total / 2**30
    match = _FAMILY.search(name.removeprefix("NVIDIA").upper())
    family = match.group(1) if match else "GPU"
    for model in GpuModel.objects.filter(name__istartswith=family):
        if gib and abs(model.memory_gb - gib) <= 0.1 * model.memory_gb:
            return model
    return instance_services.register_gpu_model(
        actor=actor, name=f"{family}-{round(gib)}GB", memory_gb=max(1, round(gib)),
        power_limit_w=(power_limit_mw or 700_000) // 1000, reported_as=name,
    )


def _slice_profile(model: GpuModel, name: str, memory_total: int | None, *, actor) -> SliceProfile:
    existing = SliceProfile.objects.filter(gpu_model=model, name=name).first()
    if existing is not None:
        return existing
    memory_gb = max(1, round((memory_total or 0) / 2**30))
    return instance_services.register_slice_profile(
        actor=actor, gpu_model=model, kind=SliceKind.MIG, name=name[:40], memory_gb=memory_gb,
        slices_per_gpu=max(1, min(7, model.memory_gb // memory_gb)),
    )


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
    def read(cls, host_id: int, first: datetime, last: datetime) -> Holds:
        rows = (
            GpuHold.objects.filter(gpu__host_id=host_id, start__lte=last)
            .filter(Q(end__isnull=True) | Q(end__gt=first))
            .values_list("gpu_id", "slice_id", "start", "end", "instance_id", "team_id")
        )
        return cls(rows)

    def team_ids(self) -> set[int]:
        return {hold.team_id for holds in self.by_device.values() for hold in holds}

    def at(self, device: Device, when: datetime) -> tuple[int | None, int | None]:
        for hold in self.by_device.get((device.gpu_id, device.slice_id), ()):
            if hold.start <= when and (hold.end is None or when < hold.end):
                return hold.instance_id, hold.team_id
        return None, None


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
    latest: dict[str, dict]  # device uuid -> live entry


def store(*, link: Link, batches: list[Samples]) -> Stored:
    """Write ``batches`` (checked frames of one host, in order) in one transaction.

    Per (host, boot_id) the highest stored seq (``high``) rises in the transaction that
    stores the records under it, so a record is stored exactly once however often it
    is sent. Records of GPUs this host does not have, and events of unknown kinds, are
    acknowledged and discarded (protocol section 3.2).
    """
    try:
        with transaction.atomic():
            stored = _store(link, batches)
    except Exception:
        link.forget()
        raise
    return stored


def _store(link: Link, batches: list[Samples]) -> Stored:
    devices = link.devices()
    ahead = _clamp_future(link, batches)
    times = [r.t for batch in batches for r in batch.records]
    holds = Holds.read(link.host_id, datetime.fromtimestamp(min(times), tz=UTC), datetime.fromtimestamp(max(times), tz=UTC))
    link.watch.load(devices, holds.team_ids())
    rows, events, newest, acks = [], [], {}, []
    duplicates = discarded = 0
    oldest_t = None
    for batch in batches:
        high = _advance(link, batch.boot_id, batch.last_seq)
        fresh = [r for r in batch.records if r.seq > high] if batch.first_seq <= high else batch.records
        duplicates += len(batch.records) - len(fresh)
        acks.append((batch.boot_id, link.high[batch.boot_id][1]))
        for record in fresh:
            device_uuid = record.slice or record.gpu
            device = devices.get(device_uuid)
            if device is None or device.gpu_uuid != record.gpu:
                discarded += 1
                continue
            when = datetime.fromtimestamp(record.t, tz=UTC)
            instance_id, team_id = holds.at(device, when)
            if record.event is not None:
                if record.event["kind"] in p.EVENT_KINDS:
                    events.append((record, device, when, instance_id, team_id))
                    link.watch.event(device_uuid, device, record.t, record.event, instance_id, team_id)
                else:
                    discarded += 1
                continue
            rows.append(_row(record.m, record.procs, device, when, instance_id, team_id))
            link.watch.observe(device_uuid, device, record.t, record.m, instance_id, team_id)
            if oldest_t is None or record.t < oldest_t:
                oldest_t = record.t
            kept = newest.get(device_uuid)
            if kept is None or record.t >= kept[0].t:
                newest[device_uuid] = (record, device, instance_id, team_id)
    latest = {uuid: _live_entry(*kept, link.host_id, link.host_name) for uuid, kept in newest.items()}
    insert_samples(rows)
    _store_events(link.host_id, link.host_name, events)
    link.watch.apply()
    _note_late(oldest_t)
    if ahead:
        _note_clock_ahead(link.host_id, *ahead)
    link.keep(latest, len(batches), len(rows), duplicates)
    if link.due():
        link.write_kept()
    return Stored(acks=acks, stored=len(rows), duplicates=duplicates, discarded=discarded, latest=latest)


def _clamp_future(link: Link, batches: list[Samples]) -> tuple[int, float] | None:
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
_compact = json.JSONEncoder(separators=(",", ":")).encode


def _row(m: dict, procs, device: Device, when: datetime, instance_id, team_id) -> list:
    row = [
        when, device.gpu_id, device.slice_id, instance_id, team_id,
        None if procs is None else _compact(procs),
        *[m.get(name) for name in RAW_METRICS],
    ]
    for at in _UNSIGNED_AT:
        if row[at] is not None and row[at] > 2**63 - 1:
            row[at] = to_signed(row[at])
    return row


def _live_entry(record, device: Device, instance_id, team_id, host_id, host_name) -> dict:
    return {
        "uuid": record.slice or record.gpu, "host": host_name, "index": device.index, "instance": instance_id,
        "team": team_id, "t": datetime.fromtimestamp(record.t, tz=UTC).isoformat(), "m": record.m, "stale": False,
        "_t": record.t, "_host_id": host_id, "_gpu_id": device.gpu_id, "_slice_id": device.slice_id,
    }


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


def _store_events(host_id: int, host_name: str, events: list) -> None:
    if not events:
        return
    rows = []
    for record, device, when, instance_id, team_id in events:
        e = record.event
        rows.append(GpuEvent(
            time=when, kind=e["kind"], host_id=host_id, gpu_id=device.gpu_id, uuid=record.device,
            code=e.get("code"), message=e.get("message", ""), instance_id=instance_id, team_id=team_id,
            details={"seq": record.seq},
        ))
        where = dict(host_id=host_id, gpu_id=device.gpu_id, uuid=record.device, instance_id=instance_id,
                     team_id=team_id)
        if e["kind"] == "gpu_lost":
            alerts.raise_alert(AlertKind.GPU_LOST, alerts.Condition(
                key=f"gpu_lost:{record.device}",
                message=f"{record.device} on {host_name} is lost: {e.get('message') or 'no detail'}", **where,
            ), now=when)
        elif e["kind"] == "gpu_back":
            alerts.resolve_key(f"gpu_lost:{record.device}", now=when, why="the agent reports it back")
    GpuEvent.objects.bulk_create(rows)


def _note_late(oldest_t: float | None) -> None:
    """Samples older than what the rollups already cover make those buckets dirty.
    Rollups trail real time by ROLLUP_DELAY_S, so fresh samples need no check."""
    if oldest_t is None or time.time() - oldest_t < float(getattr(settings, "ROLLUP_DELAY_S", 30)):
        return
    oldest = datetime.fromtimestamp(oldest_t, tz=UTC)
    RollupCursor.objects.filter(done_until__gt=oldest).filter(
        Q(dirty_from__isnull=True) | Q(dirty_from__gt=oldest)
    ).update(dirty_from=oldest)
