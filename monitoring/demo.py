"""Demo telemetry: agent tokens for the demo fleet, rollup history that follows the
seeded allocations (two days of 1-minute rollups, a week for instances running on
demand or spot, 1-hour rollups back to each allocation's start), and the agent
commands ``rundemo`` starts.

Raw tokens are written only to files under VAR_DIR, readable by their owner alone:
``agent-fleet.json`` (the sim agent's ``--fleet`` file) and ``replay.token``.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agent.backends.sim import PROFILES, allocated_kind, reports_gpm
from console import bulk
from instances.demo import REPLAY_HOST
from instances.models import (
    Gpu,
    GpuHold,
    Host,
    HostKind,
    Instance,
    LifecycleEvent,
    PricingModel,
    State,
)

from . import activity, services
from .catalog import GAUGES
from .models import Rollup1h, Rollup1m, RollupCursor

HISTORY = timedelta(days=2)
# Rightsizing reads the last 7 or 14 days of minutes of what runs on demand or spot.
ADVICE_HISTORY = timedelta(days=7)
TRACE = Path(settings.BASE_DIR) / "agent" / "traces" / "h200_mixed.jsonl"

def var_dir() -> Path:
    return Path(settings.VAR_DIR)


def fleet_path() -> Path:
    return var_dir() / "agent-fleet.json"


def replay_token_path() -> Path:
    return var_dir() / "replay.token"


def seed(*, users, stdout=None) -> None:
    ops = users["ops"]
    hosts = list(Host.objects.prefetch_related("gpus__model", "gpus__slices__profile").order_by("name"))
    _write_tokens(ops, hosts)
    rows = backfill()
    if stdout is not None:
        stdout.write(f"Telemetry: agent tokens in {fleet_path()} and {replay_token_path()}; {rows} rollup rows of history.")


# --- tokens -----------------------------------------------------------------------------


def _write_tokens(ops, hosts: list[Host]) -> None:
    known = _tokens_on_file()
    fleet, replay = [], None
    for host in hosts:
        raw = known.get(host.name)
        if raw is None or services.authenticate_agent(raw) is None:
            raw = services.create_host_token(actor=ops, host=host, name="demo agent")[1]
        if host.name == REPLAY_HOST:
            replay = raw
            continue
        gpus = [_fleet_gpu(host, g) for g in sorted(host.gpus.all(), key=lambda g: g.index)]
        if gpus:
            fleet.append({"host": host.name, "token": raw, "gpus": gpus})
    _write_private(fleet_path(), json.dumps(fleet, indent=1) + "\n")
    if replay is not None:
        _write_private(replay_token_path(), replay + "\n")


def _fleet_gpu(host: Host, gpu: Gpu) -> dict:
    entry = {"uuid": gpu.uuid, "index": gpu.index, "name": gpu.model.name, "memory_total": gpu.memory_total,
             "power_limit_mw": gpu.model.power_limit_w * 1000}
    pieces = sorted(gpu.slices.all(), key=lambda s: s.gpu_instance_id)
    if host.kind in (HostKind.MIG, HostKind.VGPU) and pieces:
        entry["mode"] = host.kind
        entry["slices"] = [
            {"uuid": s.uuid, "gpu_instance_id": s.gpu_instance_id, "profile": s.profile.name,
             "memory_total": s.profile.memory_gb * 2**30}
            for s in pieces
        ]
    return entry


def _tokens_on_file() -> dict[str, str]:
    found = {}
    try:
        for entry in json.loads(fleet_path().read_text()):
            found[entry["host"]] = entry["token"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        found[REPLAY_HOST] = replay_token_path().read_text().strip()
    except OSError:
        pass
    return found


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


# --- history ------------------------------------------------------------------------------


def _running_spans(instance_ids) -> dict[int, list[tuple[datetime, datetime | None]]]:
    """{instance id: [(from, until), …]} of the times each instance was running."""
    spans: dict[int, list] = {}
    for event in LifecycleEvent.objects.filter(instance_id__in=instance_ids).order_by("time", "id"):
        runs = spans.setdefault(event.instance_id, [])
        if event.to_state == State.RUNNING:
            runs.append([event.time, None])
        elif runs and runs[-1][1] is None:
            runs[-1][1] = event.time
    return {k: [tuple(r) for r in v] for k, v in spans.items()}


def _kind(instance: Instance, runs, at: datetime, rank: int) -> str:
    """What the simulated agent runs on the instance's device of ``rank`` at ``at``: its
    workload while it was running, idle while pending or stopping (sim.allocated_kind's rule)."""
    running = any(start <= at and (until is None or at < until) for start, until in runs)
    return _allocated_kind(("running" if running else "pending", instance.name, rank))


_allocated_kind = functools.cache(allocated_kind)  # called once a minute of each device


def _ranks(holds: list[GpuHold]) -> dict[int, int]:
    """{hold id: its device's rank among the holds of one placement (same instance,
    host and start), by GPU index then slice}: what the sim agent counts on its host."""
    ranks, seen = {}, {}
    for hold in sorted(holds, key=lambda h: (h.gpu.index, getattr(h.slice, "gpu_instance_id", 0))):
        key = (hold.instance_id, hold.gpu.host_id, hold.start)
        ranks[hold.pk] = seen[key] = seen.get(key, -1) + 1
    return ranks


def _minutes_from(hold: GpuHold, start: datetime, longer: datetime) -> datetime:
    """Where a hold's 1-minute rollups begin: ``longer`` ago for an instance running
    now on demand or spot, else ``start``."""
    instance = hold.instance
    advised = hold.end is None and instance.state == State.RUNNING and instance.pricing_model != PricingModel.RESERVED
    return longer if advised else start


def _reports(gpu, piece) -> tuple[str | None, bool, int | None, int]:
    """What a held GPU or slice reports, as the simulated agent reports it: its mode
    (None for a whole GPU), whether it has GPM metrics (from Hopper on, per slice too),
    its power limit in mW (a whole GPU only) and its memory in bytes."""
    if piece is not None:
        return gpu.host.kind, reports_gpm(gpu.model.name), None, piece.profile.memory_gb * 2**30
    return None, reports_gpm(gpu.model.name), gpu.model.power_limit_w * 1000, gpu.memory_total


def _minute_values(kind: str, rng: random.Random, limit_mw: int | None, memory: int, mode: str | None,
                   gpm: bool = True) -> dict:
    """One minute's averages, from the simulated agent's own workload profiles. A slice
    leaves out what its mode cannot report (MIG: power, temperature, clocks; vGPU: GPM),
    a whole GPU before Hopper its GPM metrics (``gpm``, as the simulated agent)."""
    util, mem_util, tensor, occupancy, dram, power, mem = PROFILES[kind]

    def pick(bounds):
        return bounds[0] + (bounds[1] - bounds[0]) * rng.random()

    share = pick(power)
    busy = kind not in ("idle", "held")
    avg = {"gpu_util": pick(util), "mem_util": pick(mem_util), "mem_used": memory * pick(mem)}
    if mode != "vgpu":
        drawn = {"sm_occupancy_pct": pick(occupancy), "tensor_active_pct": pick(tensor), "dram_bw_util_pct": pick(dram)}
        if gpm:  # drawn either way, so that the other figures stay the same
            avg |= drawn
        elif mode == "mig":  # a MIG slice's activity is GPM's: an A100's slices have none
            del avg["gpu_util"]
    if mode is None:
        avg |= {
            "power_mw": limit_mw * share, "temp_c": 30 + 50 * share, "fan_pct": 30 + 40 * share,
            "sm_clock_mhz": 1980 - 200 * rng.random() if busy else 345, "mem_clock_mhz": 2619,
        }
    return avg


# Each gauge's name, its min/avg/max columns and whether it is a percentage (capped at 100).
_COLUMNS = tuple((name, f"{name}_min", f"{name}_avg", f"{name}_max",
                  name.endswith("_pct") or name in ("gpu_util", "mem_util")) for name in GAUGES)


def _stats(avg: dict, rng: random.Random) -> dict:
    out, rand = {}, rng.random
    for name, low, mean, high, pct in _COLUMNS:
        value = avg.get(name)
        if value is None:
            out[low] = out[mean] = out[high] = None
            continue
        spread = abs(value) * 0.08 * rand()
        out[low] = value - spread if value > spread else 0.0
        out[mean] = value
        out[high] = min(100.0, value + spread) if pct else value + spread
    return out


@transaction.atomic
def backfill(now: datetime | None = None) -> int:
    """Two days of 1-minute rollups up to this minute (a week for what runs on demand or
    spot now), and 1-hour rollups of the whole hours among them, for every GPU and slice
    while an instance held it (``GpuHold``): its workload while running, idle while
    pending or stopping, nothing while free, from the same profiles the simulated agent
    runs, so the live data carries on where the history ends. Before those days, 1-hour
    rollups only (what retention leaves of the past), back to each hold's start.
    Idempotent: a second run adds nothing."""
    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0)
    full_hours = now.replace(minute=0, second=0, microsecond=0)
    start = full_hours - HISTORY
    if Rollup1m.objects.filter(bucket__gte=start).exists():
        return 0
    holds = list(
        GpuHold.objects.filter(start__lt=end).select_related("instance", "gpu__model", "gpu__host", "slice__profile")
    )
    runs, ranks = _running_spans({h.instance_id for h in holds}), _ranks(holds)
    longer = full_hours - max(HISTORY, ADVICE_HISTORY)
    first = {h.pk: _minutes_from(h, start, longer) for h in holds}
    hours = [row for hold in holds if hold.start < first[hold.pk]
             for row in _hours_before(hold, first[hold.pk], runs, ranks[hold.pk])]
    holds = [h for h in holds if h.end is None or h.end > first[h.pk]]
    minutes = []
    for hold in holds:
        gpu, piece, instance = hold.gpu, hold.slice, hold.instance
        rng = random.Random(f"{gpu.uuid}/{getattr(piece, 'uuid', '')}/{instance.pk}")
        mode, gpm, limit_mw, memory = _reports(gpu, piece)
        energy = rng.randrange(10**9, 10**11)
        at = max(first[hold.pk], hold.start.replace(second=0, microsecond=0) + timedelta(minutes=1))
        spans, rank = runs.get(instance.pk, ()), ranks[hold.pk]
        until = min(end, hold.end) if hold.end else end
        hour_rows: dict[datetime, list[dict]] = {}
        while at < until:
            stats = _stats(_minute_values(_kind(instance, spans, at, rank), rng, limit_mw, memory, mode, gpm), rng)
            row = dict(bucket=at, gpu_id=gpu.pk, slice_id=getattr(piece, "pk", None), instance_id=instance.pk,
                       team_id=hold.team_id, samples=60, observed_s=60.0)
            if limit_mw:
                delta = stats["power_mw_avg"] * 60
                energy += int(delta)
                row |= {"energy_mj_delta": delta, "energy_mj_last": energy}
            else:
                row |= {"energy_mj_delta": None, "energy_mj_last": None}
            minutes.append(row | stats)
            if at < full_hours:
                hour_rows.setdefault(at.replace(minute=0), []).append(minutes[-1])
            at += timedelta(minutes=1)
        hours += [_hour(bucket, rows) for bucket, rows in hour_rows.items()]
    _insert(Rollup1m, minutes)
    _insert(Rollup1h, hours)
    # The hours up to the last whole one are built, with their minutes' idle seconds,
    # as the 1-hour tier would have built them (activity.exact_hours).
    RollupCursor.objects.filter(name="1h", done_until=None).delete()  # a run that found no samples yet
    RollupCursor.objects.get_or_create(name="1h", defaults={"idle_from": longer, "done_until": full_hours})
    return len(minutes) + len(hours)


def _hours_before(hold: GpuHold, until: datetime, runs: dict, rank: int) -> list[dict]:
    """1-hour rollups of one hold from its start to ``until`` (or its end): each hour's
    share of the hold, at the workload of the hour's middle."""
    gpu, piece, instance = hold.gpu, hold.slice, hold.instance
    rng = random.Random(f"{gpu.uuid}/{getattr(piece, 'uuid', '')}/{instance.pk}/hours")
    mode, gpm, limit_mw, memory = _reports(gpu, piece)
    stop = min(until, hold.end) if hold.end else until
    energy = rng.randrange(10**9, 10**11)
    rows = []
    bucket = hold.start.replace(minute=0, second=0, microsecond=0)
    while bucket < stop:
        lo, hi = max(bucket, hold.start), min(bucket + timedelta(hours=1), stop)
        seconds = (hi - lo).total_seconds()
        kind = _kind(instance, runs.get(instance.pk, ()), lo + (hi - lo) / 2, rank)
        stats = _stats(_minute_values(kind, rng, limit_mw, memory, mode, gpm), rng)
        delta = stats["power_mw_avg"] * seconds if limit_mw else None
        energy += int(delta or 0)
        rows.append(dict(bucket=bucket.astimezone(UTC), gpu_id=gpu.pk, slice_id=getattr(piece, "pk", None),
                         instance_id=instance.pk, team_id=hold.team_id, samples=int(seconds), observed_s=seconds,
                         judged_s=None, idle_s=None, energy_mj_delta=delta,
                         energy_mj_last=energy if limit_mw else None, **stats))
        bucket += timedelta(hours=1)
    return rows


def _insert(model, rows: list[dict]) -> None:
    """A binary COPY on PostgreSQL (an INSERT a row, even pipelined, took most of the
    seeding time for hundreds of thousands of rows); elsewhere plain INSERTs (the ORM's
    per-field preparation would cost most of it)."""
    if not rows:
        return
    columns = list(rows[0])
    if connection.vendor == "postgresql":
        bulk.copy(model, columns, list(map(operator.itemgetter(*columns), rows)))
        return
    adapt = functools.cache(connection.ops.adapt_datetimefield_value)  # a minute is shared by every device
    rest = operator.itemgetter(*columns[1:])
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} ({names}) VALUES ({marks})",
            [(adapt(r["bucket"]), *rest(r)) for r in rows],
        )


def _activity(row: dict) -> float | None:
    """A minute rollup's real activity, as the 1-hour tier judges it (activity.py)."""
    return activity.real_activity(*(row.get(name) for name in activity.ACTIVITY))


def _hour(bucket: datetime, rows: list[dict]) -> dict:
    first = rows[0]
    stats = {}
    for _name, low, mean, high, _pct in _COLUMNS:
        if first[mean] is None:
            stats[low] = stats[mean] = stats[high] = None
            continue
        stats[low] = min(r[low] for r in rows)
        stats[mean] = sum(r[mean] for r in rows) / len(rows)
        stats[high] = max(r[high] for r in rows)
    energy = None if first["energy_mj_delta"] is None else sum(r["energy_mj_delta"] for r in rows)
    judged = [(r["observed_s"], a) for r in rows if (a := _activity(r)) is not None]
    return dict(
        bucket=bucket.astimezone(UTC), gpu_id=first["gpu_id"], slice_id=first["slice_id"],
        instance_id=first["instance_id"], team_id=first["team_id"], samples=60 * len(rows),
        observed_s=60.0 * len(rows), judged_s=sum(seconds for seconds, _ in judged),
        idle_s=sum(seconds for seconds, a in judged if a < activity.IDLE_BELOW_PCT),
        energy_mj_delta=energy, energy_mj_last=rows[-1]["energy_mj_last"], **stats,
    )


# --- agents ---------------------------------------------------------------------------------


def agent_commands(base_url: str) -> list[list[str]]:
    """The demo's agents: one sim agent for every demo host but the replay host, and one
    replay agent looping the recorded H200 trace as ``use1-h200-replay``."""
    server = base_url.replace("https://", "wss://").replace("http://", "ws://").rstrip("/") + "/ws/agent/"
    agent = [sys.executable, "-m", "agent", "--server", server]
    spool = var_dir() / "agent-spool"
    commands = []
    if fleet_path().exists():
        commands.append([*agent, "--backend", "sim", "--fleet", str(fleet_path()), "--follow-allocations",
                         "--spool-dir", str(spool / "sim")])
    if replay_token_path().exists() and TRACE.exists():
        commands.append([
            *agent, "--backend", "replay", "--trace", str(TRACE), "--host", REPLAY_HOST,
            "--token-file", str(replay_token_path()), "--spool-dir", str(spool / "replay"),
        ])
    return commands

