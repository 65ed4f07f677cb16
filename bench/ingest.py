"""Ingest, end to end: sim hosts over real websockets into a daphne server, frame sent
to ack received (the server acks after commit), beside raw psycopg COPY of the same
rows into the same table in the same run; then the same load into SQLite.

    python bench/ingest.py                       # PostgreSQL at 127.0.0.1:5432, then SQLite
    python bench/ingest.py --hosts 16 --frames 10 --skip-sqlite
    python bench/ingest.py --pg postgres://postgres@127.0.0.1:5432/postgres
    BENCH_PYSPY=spy.txt python bench/ingest.py ...   # py-spy samples each server while timed

Every host is one websocket connection that behaves as the v1 agent does: one
samples frame in flight, the next only after its ack. Frames are built beforehand
by the agent's sim backend and its own encoder (protocol.encode_record,
samples_frame), so building them is not timed. A GPU-sample is one record of one
GPU. The run fails unless the database holds exactly the records sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent import protocol  # noqa: E402
from agent.backends.sim import SimSource  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import asgi_servers  # noqa: E402
from wsclient import free_port, free_ports  # noqa: E402,F401  (free_port: bench/outage.py's too)

PYTHON = sys.executable
REGION = "bench-region"

PREPARE = """
import json
from instances.models import Region
from monitoring import services
region, _ = Region.objects.get_or_create(name={region!r})
tokens = {{}}
for name in {hosts!r}:
    host, _ = services.ensure_host(actor="bench", name=name, region=region.name)
    tokens[name] = services.create_host_token(actor="bench", host=host)[1]
print("TOKENS " + json.dumps(tokens))
"""

# Alert rules evaluated on ingest: "none" disables every rule; "default" keeps the
# operators' fleet defaults (the sim hosts hold no instances, so no team's rules apply);
# "many" keeps them and adds ten fleet rules on fast metrics, some of which hold on the
# sim's readings (so alerts open, refresh and resolve during the run).
RULES = {
    "none": "from alerting.models import AlertRule; AlertRule.objects.update(enabled=False)",
    "many": """
from alerting import services
for i, (metric, op, threshold) in enumerate([
    ("gpu_util", ">=", 50), ("gpu_util", "<", 20), ("real_activity", ">=", 60), ("tensor_active", ">=", 30),
    ("mem_used_pct", ">=", 50), ("power_pct", ">=", 60), ("temp_c", ">=", 60), ("throttle_power", ">=", 1),
    ("throttle_thermal", ">=", 1), ("ecc_uncorrected", ">", 0)]):
    services.create_rule(actor="bench", name=f"bench {i}", metric=metric, comparison=op, threshold=threshold,
                         hold_s=5)
""",
}


# --- the database under test -----------------------------------------------------------


class Database:
    """A fresh database (and VAR_DIR) for one run; ``env`` configures the server for it."""

    def __init__(self, kind: str, admin_url: str | None, workdir: Path):
        self.kind = kind
        self.admin_url = admin_url
        self.var = workdir / f"var-{kind}"
        self.var.mkdir(parents=True)
        self.name = f"bench_ingest_{os.getpid()}"
        # As in production: DEBUG off (no query log), no periodic tasks in the server.
        self.env = {**os.environ, "GPUCONSOLE_VAR_DIR": str(self.var), "INPROCESS_SCHEDULER": "false",
                    "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(40), "SECURE_SSL_REDIRECT": "false",
                    "LOG_LEVEL": "WARNING"}
        self.env.pop("REDIS_URL", None)
        self.env.pop("DATABASE_URL", None)
        if kind == "postgresql":
            parts = urlsplit(admin_url)
            self.url = urlunsplit(parts._replace(path="/" + self.name))
            self.env["DATABASE_URL"] = self.url

    def create(self) -> None:
        if self.kind == "postgresql":
            import psycopg

            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
        subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=REPO, env=self.env, check=True)

    def drop(self) -> None:
        if self.kind == "postgresql":
            import psycopg

            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def prepare(self, hosts: list[str], rules: str = "") -> dict[str, str]:
        code = PREPARE.format(region=REGION, hosts=hosts) + RULES.get(rules, "")
        out = subprocess.run([PYTHON, "manage.py", "shell", "-c", code], cwd=REPO, env=self.env, check=True,
                             capture_output=True, text=True).stdout
        line = next(x for x in out.splitlines() if x.startswith("TOKENS "))
        return json.loads(line[len("TOKENS "):])

    def query(self, sql: str):
        if self.kind == "postgresql":
            import psycopg

            with psycopg.connect(self.url) as conn:
                return conn.execute(sql).fetchall()
        with sqlite3.connect(self.var / "db.sqlite3") as conn:
            return conn.execute(sql).fetchall()


class Server:
    def __init__(self, db: Database, port: int, kind: str = "daphne"):
        self.db, self.port, self.kind = db, port, kind
        self.process = None

    def start(self) -> None:
        log = open(self.db.var / "daphne.log", "w")  # noqa: SIM115 (closed with the process)
        profile = ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
        command = asgi_servers.command(self.kind, self.port)
        if self.kind == "daphne":
            command = [PYTHON, *profile, "-m", "daphne", *command[1:]]
        self.process = subprocess.Popen(
            command,
            cwd=REPO, env=self.db.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited; see {self.db.var / 'daphne.log'}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("the server did not start within 60 s")

    def sample(self) -> None:
        """With BENCH_PYSPY=FILE, py-spy samples the server (every thread) into FILE
        (collapsed stacks), from here until ``stop``."""
        out = os.environ.get("BENCH_PYSPY")
        if out:
            spy = shutil.which("py-spy", path=str(Path(PYTHON).parent)) or "py-spy"
            self.spy = subprocess.Popen([spy, "record", "--gil", "--format", "raw", "-r", "250", "-o", out,
                                         "-p", str(self.process.pid)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
            time.sleep(1)

    def stop(self) -> None:
        spy = getattr(self, "spy", None)
        if spy is not None and spy.poll() is None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=30)
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def cpu_seconds(self) -> float:
        return asgi_servers.cpu_seconds(self.process.pid)


# --- the load ----------------------------------------------------------------------------


def build_frames(sim: SimSource, frames: int, per_frame: int, start_t: float) -> dict[str, dict]:
    """Per host: its hello, and ``frames`` samples frames of ``per_frame`` records."""
    out = {h.host: {"gpus": [g.hello() for g in h.gpus], "bodies": [], "seq": 0, "records": []} for h in sim.fleet}
    tick = 0
    while any(len(h["bodies"]) < frames * per_frame for h in out.values()):
        for host, records in sim.tick(start_t + tick).items():
            entry = out[host]
            for record in records:
                if len(entry["bodies"]) >= frames * per_frame:
                    break
                body = protocol.encode_record(record, entry["seq"] + 1)
                if body is None:
                    continue
                entry["seq"] += 1
                entry["bodies"].append(body)
                entry["records"].append(json.loads(body))
        tick += 1
    boot = "b" * 32
    for entry in out.values():
        bodies = entry.pop("bodies")
        entry["frames"] = [protocol.samples_frame(boot, bodies[i:i + per_frame])
                           for i in range(0, len(bodies), per_frame)]
    return out


async def connect_all(ports: dict[str, int], tokens: dict[str, str], load: dict[str, dict]) -> dict:
    """Every host connected and welcomed (registering its GPUs on first sight)."""
    from websockets.asyncio.client import connect

    sockets = {}
    for host, entry in load.items():
        url = f"ws://127.0.0.1:{ports[host]}/ws/agent/"
        ws = await connect(url, additional_headers={"Authorization": f"Bearer {tokens[host]}"},
                           max_size=1 << 22, open_timeout=30, compression=None)
        await ws.send(protocol.hello_frame(host=host, boot_id="b" * 32, backend="sim", gpus=entry["gpus"]))
        welcome = json.loads(await ws.recv())
        if welcome.get("type") != "welcome":
            raise SystemExit(f"{host}: no welcome: {welcome}")
        sockets[host] = ws
    return sockets


async def send_all(sockets: dict, load: dict[str, dict]) -> float:
    """Seconds to send every frame, each host awaiting each ack before its next frame."""

    async def one(host: str) -> None:
        ws = sockets[host]
        for text in load[host]["frames"]:
            await ws.send(text)
            ack = json.loads(await asyncio.wait_for(ws.recv(), 120))
            if ack.get("type") != "ack":
                raise SystemExit(f"{host}: expected an ack, got {ack}")

    began = time.perf_counter()
    await asyncio.gather(*(one(h) for h in sockets))
    elapsed = time.perf_counter() - began
    for ws in sockets.values():
        await ws.close()
    return elapsed


def run_server_load(db: Database, args, sim: SimSource, workers: int, rules: str = "", kind: str = "daphne") -> dict:
    """``workers`` server processes (``kind``: daphne, uvicorn or granian), each host
    connected to one of them in turn (as a TCP load balancer in front of several ASGI
    workers would spread them)."""
    db.create()
    tokens = db.prepare([h.host for h in sim.fleet], rules)
    servers = [Server(db, port, kind) for port in free_ports(workers)]
    try:
        for server in servers:
            server.start()
        load = build_frames(sim, args.frames, args.records, time.time() - 7200)
        ports = {h.host: servers[i % workers].port for i, h in enumerate(sim.fleet)}
        records = sum(len(e["records"]) for e in load.values())

        async def measure():
            sockets = await connect_all(ports, tokens, load)
            for server in servers:
                server.sample()
            cpu0 = sum(s.cpu_seconds() for s in servers)
            elapsed = await send_all(sockets, load)
            return elapsed, sum(s.cpu_seconds() for s in servers) - cpu0

        elapsed, cpu = asyncio.run(measure())
    finally:
        for server in servers:
            server.stop()
    stored = db.query("SELECT count(*) FROM monitoring_sample")[0][0]
    events = db.query("SELECT count(*) FROM monitoring_gpuevent WHERE kind = 'xid'")[0][0]
    if stored + events != records:
        raise SystemExit(f"{db.kind}: sent {records} records, the database holds {stored} samples + {events} events")
    alerts = db.query("SELECT count(*) FROM monitoring_alert")[0][0]
    return {"records": records, "seconds": elapsed, "per_s": records / elapsed, "server_cpu_s": cpu, "alerts": alerts,
            "server_cpu_us_per_sample": cpu / records * 1e6, "workers": workers, "server": kind, "load": load,
            "load_average": os.getloadavg()[0]}


# --- the COPY baseline --------------------------------------------------------------------


def copy_baseline(db: Database, load: dict[str, dict]) -> dict:
    """The same rows through one psycopg COPY into a twin of the samples table."""
    import psycopg

    from monitoring.catalog import RAW_METRICS, UNSIGNED_64, to_signed

    with psycopg.connect(db.url) as conn:
        gpu_ids = dict(conn.execute("SELECT uuid, id FROM instances_gpu").fetchall())
        conn.execute("CREATE TABLE bench_copy (LIKE monitoring_sample INCLUDING ALL)")
        conn.commit()
    columns = ["time", "gpu_id", "slice_id", "instance_id", "team_id", "procs", *RAW_METRICS]
    from datetime import UTC, datetime

    rows = []
    for entry in load.values():
        for r in entry["records"]:
            if "event" in r:
                continue
            m = r.get("m", {})
            rows.append((datetime.fromtimestamp(r["t"], tz=UTC), gpu_ids[r["gpu"]], None, None, None,
                         json.dumps(r["procs"]) if "procs" in r else None,
                         *(to_signed(m[k]) if k in UNSIGNED_64 and k in m else m.get(k) for k in RAW_METRICS)))
    with psycopg.connect(db.url) as conn:
        began = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY bench_copy ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.commit()
        elapsed = time.perf_counter() - began
        count = conn.execute("SELECT count(*) FROM bench_copy").fetchone()[0]
    assert count == len(rows)
    return {"records": len(rows), "seconds": elapsed, "per_s": len(rows) / elapsed}


# --- main -----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--frames", type=int, default=20, help="samples frames per host")
    parser.add_argument("--records", type=int, default=500, help="records per frame (the agent's maximum)")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/postgres",
                        help="an admin URL; a scratch database is created next to it and dropped")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="also run with this many server processes (default: one per CPU)")
    parser.add_argument("--sqlite-hosts", type=int, default=8)
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    parser.add_argument("--servers", default="daphne",
                        help="comma-separated ASGI servers, the same load under each: daphne, uvicorn, granian")
    parser.add_argument("--rules", choices=["postgresql", "sqlite"],
                        help="only compare ingest with alert rules off and with many rules, on this database, 1 worker")
    args = parser.parse_args()
    if not 1 <= args.records <= protocol.MAX_RECORDS_PER_FRAME:
        parser.error(f"--records must be 1-{protocol.MAX_RECORDS_PER_FRAME}")

    workdir = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    results = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "hosts": args.hosts, "gpus": args.gpus,
               "records_per_frame": args.records, "runs": []}
    try:
        if args.rules:
            compare_rules(args, workdir, results)
            return 0
        for workers, kind in [(w, k) for w in sorted({1, args.workers}) for k in asgi_servers.parse(args.servers)]:
            pg = Database("postgresql", args.pg, workdir / f"pg{workers}-{kind}")
            try:
                sim = SimSource.synthetic(args.hosts, args.gpus, prefix="bench-host", seed=1)
                run = run_server_load(pg, args, sim, workers, kind=kind)
                load = run.pop("load")
                run["copy"] = copy_baseline(pg, load)
                run["ratio_to_copy"] = run["per_s"] / run["copy"]["per_s"]
                results["runs"].append({"database": "postgresql", **run})
            finally:
                pg.drop()
        for kind in [] if args.skip_sqlite else asgi_servers.parse(args.servers):
            lite = Database("sqlite", None, workdir / f"sqlite-{kind}")
            sim = SimSource.synthetic(args.sqlite_hosts, args.gpus, prefix="bench-host", seed=1)
            run = run_server_load(lite, args, sim, 1, kind=kind)
            run.pop("load")
            results["runs"].append({"database": "sqlite", "hosts": args.sqlite_hosts, **run})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


def compare_rules(args, workdir: Path, results: dict) -> None:
    """The same load with every alert rule off, then with the defaults plus ten more."""
    for rules in ("none", "default", "many"):
        db = Database(args.rules, args.pg if args.rules == "postgresql" else None, workdir / f"rules-{rules}")
        try:
            sim = SimSource.synthetic(args.hosts, args.gpus, prefix="bench-host", seed=1)
            run = run_server_load(db, args, sim, 1, rules)
            run.pop("load")
            results["runs"].append({"database": args.rules, "rules": rules, **run})
        finally:
            db.drop()
    off, default, many = results["runs"]
    print(f"ingest with alert rules ({args.rules}), {results['date']}, {results['cpus']} CPUs, "
          f"{args.hosts} hosts x {args.gpus} GPUs")
    for run in results["runs"]:
        print(f"  rules {run['rules']:5} {run['records']:>8} GPU-samples {run['seconds']:>7.2f} s {run['per_s']:>8.0f}/s"
              f"   server CPU {run['server_cpu_us_per_sample']:.0f} us/sample, {run['alerts']} alerts, "
              f"load {run['load_average']:.1f}")
    for name, run in (("default", default), ("many", many)):
        print(f"  {name} rules / none: throughput {run['per_s'] / off['per_s']:.2f}x, "
              f"server CPU per sample {run['server_cpu_us_per_sample'] / off['server_cpu_us_per_sample']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


def report(r: dict) -> None:
    print(f"ingest benchmark, {r['date']}, {r['cpus']} CPUs, {r['hosts']} hosts x {r['gpus']} GPUs, "
          f"{r['records_per_frame']} records per frame")
    print(f"  {'path':50} {'GPU-samples':>11} {'seconds':>8} {'samples/s':>10} {'vs COPY':>8}")
    for run in r["runs"]:
        workers = f"{run['workers']} worker{'s' if run['workers'] > 1 else ''}"
        name = f"websocket -> {run.get('server', 'daphne')} ({workers}) -> {run['database']}"
        ratio = f"{run['ratio_to_copy']:.2f}x" if "ratio_to_copy" in run else ""
        print(f"  {name:50} {run['records']:>11} {run['seconds']:>8.2f} {run['per_s']:>10.0f} {ratio:>8}"
              f"   server CPU {run['server_cpu_us_per_sample']:.0f} us/sample, load {run['load_average']:.1f}")
        if "copy" in run:
            copy = run["copy"]
            print(f"  {'  psycopg COPY of the same rows, one stream':50} {copy['records']:>11} {copy['seconds']:>8.2f}"
                  f" {copy['per_s']:>10.0f}")
    for run in r["runs"]:
        base = next((b for b in r["runs"] if b.get("server", "daphne") == "daphne" and b["database"] == run["database"]
                     and b["workers"] == run["workers"]), None)
        if base is not None and run is not base:
            print(f"  {run['server']} / daphne ({run['workers']} worker{'s' if run['workers'] > 1 else ''}, "
                  f"{run['database']}): throughput {run['per_s'] / base['per_s']:.2f}x, server CPU per sample "
                  f"{run['server_cpu_us_per_sample'] / base['server_cpu_us_per_sample']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
