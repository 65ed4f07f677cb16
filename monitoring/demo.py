"""Demo telemetry: agent tokens for the demo fleet, two days of rollup history for the
GPUs of running instances, and the agent commands ``rundemo`` starts.

Raw tokens are written only to files under VAR_DIR, readable by their owner alone:
``agent-fleet.json`` (the sim agent's ``--fleet`` file) and ``replay.token``.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from instances.demo import REPLAY_HOST
from instances.models import Gpu, GpuSlice, Host, Instance, State

from . import services
from .catalog import GAUGES
from .models import Rollup1h, Rollup1m

HISTORY = timedelta(days=2)
TRACE = Path(settings.BASE_DIR) / "monitoring" / "agent" / "traces" / "h200_mixed.jsonl"

# instance name -> workload: (utilization, tensor, SM occupancy, DRAM, power share, memory share)
WORKLOADS = {
    "train": ((93, 100), (55, 85), (40, 65), (30, 55), (0.80, 0.97), (0.75, 0.92)),
    "serve": ((15, 80), (8, 40), (8, 35), (10, 35), (0.30, 0.70), (0.45, 0.65)),
    "render": ((70, 99), (0, 5), (30, 60), (40, 80), (0.55, 0.85), (0.30, 0.60)),
    "held": ((0, 3), (0, 1), (0, 1), (0, 1), (0.11, 0.15), (0.70, 0.80)),
}


def var_dir() -> Path:
    return Path(settings.VAR_DIR)


def fleet_path() -> Path:
    return var_dir() / "agent-fleet.json"


def replay_token_path() -> Path:
    return var_dir() / "replay.token"


def seed(*, users, stdout=None) -> None:
    ops = users["ops"]
    hosts = list(Host.objects.prefetch_related("gpus__model").order_by("name"))
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
        gpus = [
            {"uuid": g.uuid, "index": g.index, "name": g.model.name, "memory_total": g.memory_total,
             "power_limit_mw": g.model.power_limit_w * 1000}
            for g in sorted(host.gpus.all(), key=lambda g: g.index)
        ]
        if gpus:
            fleet.append({"host": host.name, "token": raw, "gpus": gpus})
    _write_private(fleet_path(), json.dumps(fleet, indent=1) + "\n")
    if replay is not None:
        _write_private(replay_token_path(), replay + "\n")


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


def _workload(instance: Instance) -> str:
    if instance.name.endswith("finetune"):
        return "finetune"
    for word, kind in (("train", "train"), ("pretrain", "train"), ("render", "render"), ("spot", "held")):
        if word in instance.name:
            return kind
    return "serve"


def _devices():
    """(gpu, slice or None, instance) for every GPU and slice a running instance holds."""
    running = Instance.objects.filter(state=State.RUNNING)
    for gpu in Gpu.objects.filter(instance__in=running).select_related("instance__team", "model"):
        yield gpu, None, gpu.instance
    for piece in GpuSlice.objects.filter(instance__in=running).select_related("instance__team", "gpu__model"):
        yield piece.gpu, piece, piece.instance


def _minute_values(kind: str, rng: random.Random, at: datetime, limit_mw: int, memory: int) -> dict:
    hour = at.hour + at.minute / 60
    if kind == "finetune":
        # A fine-tuning job that sits on its allocation between runs: billed, idle.
        kind = "train" if math.sin(hour / 3.0 + at.day) > -0.2 else "held"
    elif kind == "serve":
        demand = 0.5 + 0.5 * math.sin((hour - 9) / 24 * 2 * math.pi)
        kind = "serve" if rng.random() < 0.35 + 0.6 * demand else "held"
    util, tensor, occupancy, dram, power, mem = WORKLOADS[kind]

    def pick(bounds):
        return bounds[0] + (bounds[1] - bounds[0]) * rng.random()

    share = pick(power)
    avg = {
        "gpu_util": pick(util), "mem_util": pick(util) * 0.4, "mem_used": memory * pick(mem),
        "power_mw": limit_mw * share, "temp_c": 30 + 50 * share, "fan_pct": 30 + 40 * share,
        "sm_clock_mhz": 1980 - 200 * rng.random() if share > 0.3 else 345, "mem_clock_mhz": 2619,
        "sm_occupancy_pct": pick(occupancy), "tensor_active_pct": pick(tensor), "dram_bw_util_pct": pick(dram),
    }
    return avg


def _stats(avg: dict, rng: random.Random) -> dict:
    out = {}
    for name in GAUGES:
        value = avg[name]
        spread = abs(value) * 0.08 * rng.random()
        low, high = max(0.0, value - spread), value + spread
        if name.endswith("_pct") or name in ("gpu_util", "mem_util"):
            high = min(100.0, high)
        out |= {f"{name}_min": low, f"{name}_avg": value, f"{name}_max": high}
    return out


@transaction.atomic
def backfill(now: datetime | None = None) -> int:
    """Two days of 1-minute rollups up to this minute, and 1-hour rollups of the whole
    hours among them, for the GPUs of running instances; live samples take over from
    here. Idempotent: a second run adds nothing."""
    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0)
    full_hours = now.replace(minute=0, second=0, microsecond=0)
    start = full_hours - HISTORY
    devices = list(_devices())
    if not devices or Rollup1m.objects.filter(bucket__gte=start, gpu=devices[0][0]).exists():
        return 0
    minutes, hours = [], []
    for gpu, piece, instance in devices:
        rng = random.Random(f"{gpu.uuid}/{getattr(piece, 'uuid', '')}")
        kind = _workload(instance)
        limit_mw = gpu.model.power_limit_w * 1000 // (7 if piece else 1)
        memory = gpu.memory_total // (7 if piece else 1)
        energy = rng.randrange(10**9, 10**11)
        at = max(start, instance.state_changed_at.replace(second=0, microsecond=0) + timedelta(minutes=1))
        hour_rows: dict[datetime, list[dict]] = {}
        while at < end:
            stats = _stats(_minute_values(kind, rng, at, limit_mw, memory), rng)
            delta = stats["power_mw_avg"] * 60
            energy += int(delta)
            row = dict(bucket=at, gpu_id=gpu.pk, slice_id=getattr(piece, "pk", None), instance_id=instance.pk,
                       team_id=instance.team_id, samples=60, observed_s=60.0, energy_mj_delta=delta,
                       energy_mj_last=energy, **stats)
            minutes.append(row)
            if at < full_hours:
                hour_rows.setdefault(at.replace(minute=0), []).append(row)
            at += timedelta(minutes=1)
        hours += [_hour(bucket, rows) for bucket, rows in hour_rows.items()]
    _insert(Rollup1m, minutes)
    _insert(Rollup1h, hours)
    return len(minutes) + len(hours)


def _insert(model, rows: list[dict]) -> None:
    """Plain multi-row INSERTs: the ORM's per-field preparation would cost most of the
    seeding time for tens of thousands of rows of plain numbers."""
    if not rows:
        return
    columns = list(rows[0])
    adapt = connection.ops.adapt_datetimefield_value
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} ({names}) VALUES ({marks})",
            [[adapt(r["bucket"]), *(r[c] for c in columns[1:])] for r in rows],
        )


def _hour(bucket: datetime, rows: list[dict]) -> dict:
    first = rows[0]
    stats = {}
    for name in GAUGES:
        stats[f"{name}_min"] = min(r[f"{name}_min"] for r in rows)
        stats[f"{name}_avg"] = sum(r[f"{name}_avg"] for r in rows) / len(rows)
        stats[f"{name}_max"] = max(r[f"{name}_max"] for r in rows)
    return dict(
        bucket=bucket.astimezone(UTC), gpu_id=first["gpu_id"], slice_id=first["slice_id"],
        instance_id=first["instance_id"], team_id=first["team_id"], samples=60 * len(rows),
        observed_s=60.0 * len(rows), energy_mj_delta=sum(r["energy_mj_delta"] for r in rows),
        energy_mj_last=rows[-1]["energy_mj_last"], **stats,
    )


# --- agents ---------------------------------------------------------------------------------


def agent_commands(base_url: str) -> list[list[str]]:
    """The demo's agents: one sim agent for every demo host but the replay host, and one
    replay agent looping the recorded H200 trace as ``use1-h200-replay``."""
    server = base_url.replace("https://", "wss://").replace("http://", "ws://").rstrip("/") + "/ws/agent/"
    agent = [sys.executable, "-m", "monitoring.agent", "--server", server]
    spool = var_dir() / "agent-spool"
    commands = []
    if fleet_path().exists():
        commands.append([*agent, "--backend", "sim", "--fleet", str(fleet_path()), "--spool-dir", str(spool / "sim")])
    if replay_token_path().exists() and TRACE.exists():
        commands.append([
            *agent, "--backend", "replay", "--trace", str(TRACE), "--host", REPLAY_HOST,
            "--token-file", str(replay_token_path()), "--spool-dir", str(spool / "replay"),
        ])
    return commands

