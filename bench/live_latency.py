"""Sample-to-browser latency: 1,000 GPUs at 1 Hz, 20 browsers subscribed.

    .venv/bin/python bench/live_latency.py [--gpus 1000] [--clients 20] [--seconds 30]

With ``--spread`` each host samples at its own moment of the second (host i of n at
i/n of it), as a fleet of separate agents started at different times does; without it
every host of a sim agent process samples at once, one burst a second (the worst case
for one server process).

One run measures both channel layers side by side against the same scratch
database: the in-memory layer (one daphne process) and channels-redis
(REDIS_URL, default redis://127.0.0.1:6379, database 11). For each layer it starts
daphne, the sim agent streaming ``--gpus`` GPUs (8 per host) at 1 Hz through the
real agent path (outbox, spool, websocket, acks), and ``--clients`` browser-like
websocket clients with an operator's session cookie and the page's Origin, each
subscribed to the whole fleet (the heaviest subscription: every GPU reaches every
client). Latency of each GPU reading = the moment a client receives the ``gpus``
message that carries it − the agent's timestamp of the reading (one clock: every
process runs on this machine). ``missed``: readings the clients never got, from the
seconds skipped between two readings of a GPU (the agent samples at 1 Hz).

Goal (docs/benchmarks.md, "Browser console"): p99 ≤ 100 ms at 1,000 GPUs and 20 browsers
(it was 250 ms before the fleet-scale work).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

import asgi_servers  # noqa: E402 (bench/, beside this script)
import wsclient  # noqa: E402

SEED = """
import json
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_totp.models import TOTPDevice
from instances.models import GpuModel, Host, Region
from instances.inventory import add_gpu
from monitoring import services
ops = User.objects.create_user("ops", is_staff=True)
device = TOTPDevice.objects.create(user=ops, name="authenticator", confirmed=True)  # the operator's second factor
region = Region.objects.create(name="bench-1")
model = GpuModel.objects.create(name="H100-80GB", memory_gb=80, power_limit_w=700)
fleet = []
for h in range({hosts}):
    host = Host.objects.create(name=f"bench-host-{{h:04d}}", region=region)
    token = services.create_host_token(actor=ops, host=host)[1]
    gpus = [{{"uuid": f"GPU-bench-{{h:04d}}-{{i}}", "index": i, "name": "H100-80GB", "memory_total": 80 * 2**30,
             "power_limit_mw": 700000}} for i in range(min(8, {gpus} - 8 * h))]
    for g in gpus:  # a fleet already registered: the agents' hellos only reconcile it
        add_gpu(actor=ops, host=host, index=g["index"], uuid=g["uuid"], model=model, memory_total=g["memory_total"])
    fleet.append({{"host": host.name, "token": token, "gpus": gpus}})
sessions = []
for _ in range({clients}):
    s = SessionStore()
    s[SESSION_KEY] = str(ops.pk)
    s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    s[HASH_SESSION_KEY] = ops.get_session_auth_hash()
    s[DEVICE_ID_SESSION_KEY] = device.persistent_id
    s.create()
    sessions.append(s.session_key)
json.dump({{"fleet": fleet, "sessions": sessions}}, open({out!r}, "w"))
"""


GPUS_EVENT = '{"event":"gpus",'
READING_TIME = re.compile(r'"t":"([^"]+)"')  # a GPU entry's "t"; metric names are longer
READING_GPU = re.compile(r'"uuid":"([^"]+)"')
READY_WITHIN_S = 120.0
GOAL_P99_MS = 100


@functools.lru_cache(maxsize=65536)
def parse_time(text: str) -> float:
    """One parse per reading, shared by all clients in this process."""
    return datetime.fromisoformat(text).timestamp()


class Window:
    """The measured seconds: they start ``warmup`` s after the clients connect, and not
    before the readings of every GPU have reached a client (on a busy machine 125 agents
    connecting at once can take longer than the warm-up)."""

    def __init__(self, gpus: int, warmup: float, seconds: float):
        self.gpus, self.warmup, self.seconds = gpus, warmup, seconds
        self.opened = time.time()
        self.seen: set[str] = set()
        self.start = self.until = float("inf")
        self.ready_after = None

    def note(self, text: str, received: float) -> None:
        if self.ready_after is not None:
            return
        self.seen.update(READING_GPU.findall(text))
        if len(self.seen) >= self.gpus:
            self.ready_after = received - self.opened
            self.start = max(received + 1.0, self.opened + self.warmup)
            self.until = self.start + self.seconds

    def over(self) -> bool:
        now = time.time()
        return now >= self.until or (self.ready_after is None and now - self.opened > READY_WITHIN_S)


def missed(last_seen: dict[str, list[float]], gpus: int, seconds: float) -> int:
    """Readings a client never got, at the agent's 1 Hz: the seconds skipped between two
    readings of a GPU it got, and every second of a GPU it never heard from."""
    gaps = sum(max(0, round(b - a) - 1) for times in last_seen.values() for a, b in zip(times, times[1:], strict=False))
    return gaps + (gpus - len(last_seen)) * round(seconds)


async def client(url: str, session: str, origin: str, sink: list, counts: list, closed: list, window: Window,
                 losses: list) -> None:
    from websockets.exceptions import ConnectionClosed

    kept: list[tuple[float, str]] = []  # (received, text) of each gpus message in the window
    async with wsclient.browser(url, session, origin) as ws:
        await ws.send(json.dumps({"subscribe": {"kind": "fleet"}}))
        while not window.over():
            try:
                text = await asyncio.wait_for(ws.recv(), timeout=1.0)
            except TimeoutError:
                continue
            except ConnectionClosed as exc:
                closed.append(f"{wsclient.close_code(exc)} at {time.time() - window.opened:.0f} s")
                break
            received = time.time()
            if not text.startswith(GPUS_EVENT):
                continue
            if received < window.start:
                window.note(text, received)
                continue
            if received >= window.until:
                break
            # Read after the window: the 20 clients share this process, and one client
            # reading its message would delay the others' receipt.
            kept.append((received, text))
    seen: dict[str, list[float]] = {}  # GPU -> the reading times received, in order
    for received, text in kept:
        # The reading times and GPUs only: a full json.loads of every message in 20
        # clients sharing this process cost more CPU than the server's own fan-out.
        stamps = [parse_time(t) for t in READING_TIME.findall(text)]
        counts.append(len(stamps))
        sink.extend(received - t for t in stamps)
        for gpu, t in zip(READING_GPU.findall(text), stamps, strict=True):
            seen.setdefault(gpu, []).append(t)
    losses.append(missed(seen, window.gpus, window.seconds))


cpu_seconds = asgi_servers.cpu_seconds


async def server_cpu(pids: list[int], window: Window) -> list[float]:
    """CPU seconds each server process spent within the measured window."""
    while time.time() < window.start and not window.over():
        await asyncio.sleep(0.02)
    before = [cpu_seconds(pid) for pid in pids]
    while time.time() < window.until and not window.over():
        await asyncio.sleep(0.02)
    return [cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]


async def measure(port: int, sessions: list[str], gpus: int, warmup: float, seconds: float, pids: list[int]):
    window = Window(gpus, warmup, seconds)
    latencies: list[float] = []
    counts: list[int] = []
    losses: list[int] = []
    closed: list[str] = []
    origin = f"http://127.0.0.1:{port}"
    url = f"ws://127.0.0.1:{port}/ws/live/"
    cpu, *_ = await asyncio.gather(
        server_cpu(pids, window), *(client(url, s, origin, latencies, counts, closed, window, losses) for s in sessions))
    return latencies, counts, closed, window, losses, cpu


def start_server(name: str, env: dict, var: Path, kind: str = "daphne") -> tuple[subprocess.Popen, int]:
    port = wsclient.free_port()
    server = subprocess.Popen(
        asgi_servers.command(kind, port),
        cwd=ROOT,
        env=asgi_servers.env(kind, env),
        stdout=open(var / f"daphne-{name}-{port}.log", "w"),
        stderr=subprocess.STDOUT,
    )
    wsclient.wait_http(f"http://127.0.0.1:{port}/healthz", server)
    return server, port


def workers(layer: str) -> int:
    """Server processes a layer runs: ``redis<K>`` runs K (agents spread over K - 1, the
    browsers on the last), the others one (``redis2``: agents on one, browsers on another)."""
    found = re.fullmatch(r"redis(\d+)", layer)
    return int(found[1]) if found else 1


def run_layer(name: str, env: dict, data: dict, fleet_file: Path, var: Path, args, kind: str = "daphne") -> dict:
    """One layer: agents and browsers on one server process, or (``redis<K>``) agents on
    K - 1 workers, one sim agent process each, and browsers on another, joined by the
    Redis channel layer."""
    servers, agents = [], []
    count = workers(name)
    name = name if kind == "daphne" else f"{name}-{kind}"
    try:
        for _ in range(count):
            servers.append(start_server(name, env, var, kind))
        agent_ports, browser_port = [port for _, port in servers[:max(1, count - 1)]], servers[-1][1]
        fleets = [fleet_file]
        if len(agent_ports) > 1:  # each agent worker gets its share of the hosts
            fleets = []
            for i in range(len(agent_ports)):
                part = var / f"fleet-{name}-{i}.json"
                part.write_text(json.dumps(data["fleet"][i::len(agent_ports)]))
                fleets.append(part)
        for i, (port, fleet) in enumerate(zip(agent_ports, fleets, strict=True)):
            agents.append(subprocess.Popen(
                [
                    str(BIN / "gpuconsole-agent"),
                    "--server",
                    f"ws://127.0.0.1:{port}/ws/agent/",
                    "--backend",
                    "sim",
                    "--fleet",
                    str(fleet),
                    "--interval",
                    "1",
                    "--spool-dir",
                    str(var / f"spool-{name}-{i}"),
                    "--log-level",
                    "warning",
                    *(["--spread"] if args.spread else []),
                ],
                cwd=ROOT,
                env=env,
                stdout=open(var / f"agent-{name}-{i}.log", "w"),
                stderr=subprocess.STDOUT,
            ))
        latencies, counts, closed, window, losses, cpu = asyncio.run(
            measure(browser_port, data["sessions"], args.gpus, args.warmup, args.seconds,
                    [server.pid for server, _ in servers])
        )
    finally:
        for agent in agents:
            wsclient.stop(agent)
        for server, _ in servers:
            wsclient.stop(server)
    if window.ready_after is None:
        tail = "".join(p.read_text()[-1500:] for p in sorted(var.glob(f"*-{name}*.log")))
        raise SystemExit(f"{name}: the readings of {len(window.seen)} of {args.gpus} GPUs reached the clients "
                         f"in {READY_WITHIN_S:.0f} s.\n{tail}")
    ms = sorted(v * 1000 for v in latencies)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, int(p / 100 * len(ms)))]

    return {
        "readings": len(ms),
        "per_client_per_s": len(ms) / args.clients / args.seconds,
        "missed": sum(losses),
        "messages_per_client_s": len(counts) / args.clients / args.seconds,
        "gpus_per_message": statistics.mean(counts),
        "p50": pct(50),
        "p90": pct(90),
        "p99": pct(99),
        "max": ms[-1],
        "closed": closed,
        "ready_after": window.ready_after,
        "errors": server_errors(var, name),
        "agent_warnings": agent_warnings(var, name),
        # Server CPU per GPU reading stored and fanned out (µs), each server process:
        # the agents' worker first (with "memory" it also serves the browsers).
        "cpu_us": [c / (args.gpus * args.seconds) * 1e6 for c in cpu],
    }


def agent_warnings(var: Path, name: str) -> tuple[int, list[tuple[int, str]]]:
    """How many warnings and errors the sim agents logged (they log at warning level),
    and the three most common, numbers and host names left out: a worker that falls
    behind shows here first (agents reconnecting, no welcome, no ack)."""
    kinds: Counter[str] = Counter()
    for path in sorted(var.glob(f"agent-{name}-*.log")):
        for found in re.finditer(r": (?:warning|error): (.*)", path.read_text(errors="replace")):
            kinds[re.sub(r"\b[0-9a-f]{8,}\b|\d+", "N", found[1])[:120]] += 1
    return sum(kinds.values()), [(n, text) for text, n in kinds.most_common(3)]


def server_errors(var: Path, name: str) -> list[str]:
    lines = []
    for path in sorted(var.glob(f"daphne-{name}-*.log")):
        lines += [
            line for line in path.read_text().splitlines() if "Error" in line or "Exception" in line
        ]
    return lines[:5]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="measured seconds per layer (default 30)"
    )
    parser.add_argument(
        "--warmup", type=float, default=10.0,
        help="seconds before measuring (default 10), and at least 1 s after every GPU's readings arrived"
    )
    parser.add_argument(
        "--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
    )
    parser.add_argument(
        "--layers",
        default="memory,redis,redis2",
        help="comma-separated: memory, redis, redis2 (agents and browsers on two workers), "
             "redis<K> (agents over K - 1 workers, browsers on one more)",
    )
    parser.add_argument(
        "--coalesce",
        type=float,
        default=None,
        help="LIVE_COALESCE_S for the server (default: the setting's own, 0.25 s)",
    )
    parser.add_argument(
        "--spread", action="store_true",
        help="each host samples at its own moment of the second, as a fleet of separate agents "
             "does (default: every host of a sim agent process at once, one burst a second)",
    )
    parser.add_argument(
        "--servers", default="daphne",
        help="comma-separated ASGI servers, each layer under each in turn: daphne, uvicorn, granian; "
             "floor-<server> runs bench/floor_server.py (the bare path, memory layer only) under it",
    )
    args = parser.parse_args()
    if not (1 <= args.gpus <= 20_000 and 1 <= args.clients <= 200 and 5 <= args.seconds <= 120):
        parser.error("--gpus 1-20000, --clients 1-200, --seconds 5-120")
    bad = [layer for layer in args.layers.split(",") if layer not in ("memory", "redis") and not 2 <= workers(layer) <= 32]
    if bad:
        parser.error(f"unknown layer(s) {', '.join(map(repr, bad))}: memory, redis or redis<K> (K from 2 to 32)")
    agent_workers = max([workers(layer) - 1 for layer in args.layers.split(",") if layer.startswith("redis")] + [1])
    if args.spread and (args.gpus + 7) // 8 < 2 * agent_workers:
        parser.error(f"--spread needs at least two hosts (of up to 8 GPUs) per agent process: "
                     f"--gpus {8 * (2 * agent_workers - 1) + 1} or more")
    if any(map(asgi_servers.is_floor, asgi_servers.parse(args.servers))) and "memory" not in args.layers.split(","):
        parser.error("floor-<server> runs on the memory layer only: add memory to --layers")

    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        var = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL",)}
        env |= {
            "GPUCONSOLE_VAR_DIR": str(var),
            "INPROCESS_SCHEDULER": "false",
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "gpuconsole.settings",
            # As in production: DEBUG off (no debug cursor wrapping every query).
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(48),
            "SECURE_SSL_REDIRECT": "false",
        }
        if args.coalesce is not None:
            (var / "bench_settings.py").write_text(
                f"from gpuconsole.settings import *\nLIVE_COALESCE_S = {args.coalesce!r}\n"
            )
            env |= {
                "DJANGO_SETTINGS_MODULE": "bench_settings",
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(var), str(ROOT), env.get("PYTHONPATH")])
                ),
            }
        database = own_database(env)
        try:
            return bench(args, env, var)
        finally:
            drop_database(database)


def own_database(env: dict) -> tuple[str, str] | None:
    url = env.get("DATABASE_URL")
    if not url:
        return None
    admin, name, env["DATABASE_URL"] = wsclient.scratch_database(url, "bench_live")
    return admin, name


def drop_database(database: tuple[str, str] | None) -> None:
    if database is not None:
        wsclient.drop_database(*database)


def bench(args, env: dict, var: Path) -> int:
    manage = [sys.executable, str(ROOT / "manage.py")]
    hosts = (args.gpus + 7) // 8
    out = var / "seed.json"
    started = time.perf_counter()
    for step in (
        ["migrate", "--noinput", "-v0"],
        [
            "shell",
            "-v0",
            "-c",
            SEED.format(hosts=hosts, gpus=args.gpus, clients=args.clients, out=str(out)),
        ],
    ):
        done = subprocess.run(manage + step, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"manage.py {step[0]} failed:\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    fleet_file = var / "fleet.json"
    fleet_file.write_text(json.dumps(data["fleet"]))
    print(
        f"{args.gpus} GPUs on {hosts} hosts at 1 Hz, {args.clients} clients subscribed to the fleet, "
        f"{args.seconds:.0f} s measured after {args.warmup:.0f} s; setup {time.perf_counter() - started:.0f} s; "
        f"database {'PostgreSQL' if env.get('DATABASE_URL') else 'SQLite'}, "
        f"coalescing {'the default' if args.coalesce is None else f'{args.coalesce} s'}; hosts sample "
        f"{'each at its own moment of the second' if args.spread else 'all at once, one burst a second'}"
    )
    results = {}
    kinds = asgi_servers.parse(args.servers)
    for layer in args.layers.split(","):
        layer_env = dict(env)
        if layer != "memory":
            layer_env["REDIS_URL"] = args.redis
        for kind in kinds:
            if asgi_servers.is_floor(kind) and layer != "memory":
                continue  # the floor has no channel layer: one process serves agents and browsers
            key = layer if kinds == ["daphne"] else f"{layer}/{kind}"
            results[key] = run_layer(layer, layer_env, data, fleet_file, var, args, kind)
    for layer, r in results.items():
        print(f"{layer}: every GPU's readings reached a client {r['ready_after']:.0f} s after the clients connected")
        if r["closed"]:
            print(
                f"{layer}: {len(r['closed'])} client(s) closed by the server: {', '.join(r['closed'][:5])}"
            )
        for line in r["errors"]:
            print(f"{layer} server: {line[:200]}")
        total, common = r["agent_warnings"]
        if total:
            print(f"{layer}: the agents logged {total} warnings; most often: "
                  + "; ".join(f"{n}× {text!r}" for n, text in common))
    print(
        f"{'layer':16} {'readings':>9} {'missed':>7} {'per client/s':>13} {'msgs/client/s':>14} {'GPUs/msg':>9} "
        f"{'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    )
    for layer, r in results.items():
        print(
            f"{layer:16} {r['readings']:>9} {r['missed']:>7} {r['per_client_per_s']:>13.0f} "
            f"{r['messages_per_client_s']:>14.1f} "
            f"{r['gpus_per_message']:>9.0f} {r['p50']:>8.0f} {r['p90']:>8.0f} {r['p99']:>8.0f} {r['max']:>8.0f}"
        )
    for layer, r in results.items():
        shares = " + ".join(f"{us:.0f}" for us in r["cpu_us"])
        print(f"{layer}: server CPU per GPU reading (agents at 1 Hz, 8 GPUs a frame) {shares} µs"
              + (" (ingest and fan-out)" if len(r["cpu_us"]) == 1 else
                 " (agents' worker + browsers' worker)" if len(r["cpu_us"]) == 2 else
                 " (agents' workers, then the browsers' worker)"))
    for other in [layer for layer in args.layers.split(",") if layer != "memory"]:
        if {"memory", other} <= set(results):
            m, r = results["memory"], results[other]
            print(
                f"{other} / memory: p50 ×{r['p50'] / m['p50']:.2f}, p99 ×{r['p99'] / m['p99']:.2f}"
            )
    for key, r in results.items():
        layer, _, kind = key.partition("/")
        peer = kind.removeprefix("floor-") if asgi_servers.is_floor(kind) else "daphne"  # a floor's own server
        base = results.get(f"{layer}/{peer}")
        if kind and kind != "daphne" and base:
            ratio = sum(r["cpu_us"]) / sum(base["cpu_us"])
            print(f"{key} / {peer}: server CPU per reading ×{ratio:.2f}, p50 ×{r['p50'] / base['p50']:.2f}, "
                  f"p99 ×{r['p99'] / base['p99']:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} CPUs")
    print(
        f"goal p99 ≤ {GOAL_P99_MS} ms, every reading delivered:",
        ", ".join(f"{k} {'met' if v['p99'] <= GOAL_P99_MS and not v['missed'] else 'MISSED'}"
                  for k, v in results.items()),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
