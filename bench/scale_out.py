"""Ingest scaled out on one machine: N daphne workers behind a TCP load balancer.

    python bench/scale_out.py                      # 1 and 2 workers, PostgreSQL at 127.0.0.1:5432
    python bench/scale_out.py --workers 1 2 4 --hosts 16 --frames 10

Each run starts ``--workers`` daphne processes (``gpuconsole.asgi``, one PostgreSQL
database, in-memory channel layer each, as separate ASGI workers would be) and one
load balancer process listening on a single port. The balancer is a plain TCP proxy
that gives each new connection to the worker holding the fewest (least connections,
as one would configure HAProxy or nginx ``least_conn`` for long-lived websockets).
Every sim host connects to the balancer's one address, says hello and streams
``--frames`` samples frames of ``--records`` records, one in flight, the next after
its ack (the server acks after the commit), as the v1 agent does. The run fails
unless the database holds exactly the records sent.

Reported per run: samples/s from first frame to last ack, each worker's connections
and CPU seconds, the server CPU per GPU-sample (all workers together), the balancer's
CPU, and what one core holds (1 s / CPU per sample). Frames are built beforehand by
the agent's sim backend and encoder, as in bench/ingest.py, whose database and
server helpers this reuses.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import ingest as base  # noqa: E402  (bench/ingest.py: Database, Server, frames, senders)

# --- the load balancer ------------------------------------------------------------------


def balancer(listen_port: int, backends: list[int], counts, ready) -> None:
    """Least-connections TCP proxy: runs in its own process until terminated."""
    active = [0] * len(backends)

    async def pipe(reader, writer) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def handle(client_reader, client_writer) -> None:
        pick = min(range(len(backends)), key=lambda i: (active[i], i))
        active[pick] += 1
        counts[pick] += 1
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", backends[pick])
            await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))
        finally:
            active[pick] -= 1

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- one run ------------------------------------------------------------------------------


def run(args, workers: int, workdir: Path) -> dict:
    db = base.Database("postgresql", args.pg, workdir / f"w{workers}")
    sim = base.SimSource.synthetic(args.hosts, args.gpus, prefix="bench-host", seed=1)
    port, *ports = base.free_ports(workers + 1)
    servers = [base.Server(db, p) for p in ports]
    counts = multiprocessing.Array("i", workers)
    ready = multiprocessing.Event()
    lb = multiprocessing.Process(target=balancer, args=(port, [s.port for s in servers], counts, ready), daemon=True)
    try:
        db.create()
        tokens = db.prepare([h.host for h in sim.fleet])
        for server in servers:
            server.start()
        lb.start()
        if not ready.wait(30):
            raise SystemExit("the balancer did not start")
        load = base.build_frames(sim, args.frames, args.records, time.time() - 60)
        records = sum(len(e["records"]) for e in load.values())

        async def measure():
            sockets = await base.connect_all({h: port for h in load}, tokens, load)
            before = [s.cpu_seconds() for s in servers], cpu_seconds(lb.pid)
            elapsed = await base.send_all(sockets, load)
            after = [s.cpu_seconds() for s in servers], cpu_seconds(lb.pid)
            return elapsed, [b - a for a, b in zip(before[0], after[0], strict=True)], after[1] - before[1]

        elapsed, cpu, lb_cpu = asyncio.run(measure())
    finally:
        for server in servers:
            server.stop()
        if lb.is_alive():
            lb.terminate()
            lb.join(5)
    try:
        stored = db.query("SELECT count(*) FROM monitoring_sample")[0][0]
        events = db.query("SELECT count(*) FROM monitoring_gpuevent WHERE kind = 'xid'")[0][0]
    finally:
        db.drop()
    if stored + events != records:
        raise SystemExit(f"{workers} workers: sent {records} records, the database holds {stored} + {events}")
    per_sample = sum(cpu) / records
    return {"workers": workers, "records": records, "seconds": elapsed, "per_s": records / elapsed,
            "connections": list(counts), "cpu_s": cpu, "balancer_cpu_s": lb_cpu,
            "cpu_us_per_sample": per_sample * 1e6, "one_core_per_s": 1 / per_sample,
            "load_average": os.getloadavg()[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--frames", type=int, default=10, help="samples frames per host")
    parser.add_argument("--records", type=int, default=500, help="records per frame (the agent's maximum)")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/postgres",
                        help="an admin URL; a scratch database is created next to it and dropped")
    args = parser.parse_args()
    if min(args.workers) < 1 or args.hosts < max(args.workers):
        parser.error("--workers must be ≥ 1 and --hosts at least the largest worker count")
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-out-"))
    runs = []
    try:
        for workers in args.workers:
            runs.append(run(args, workers, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"ingest behind a least-connections TCP balancer, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"{os.cpu_count()} CPUs, {args.hosts} hosts x {args.gpus} GPUs, {args.frames} frames of {args.records}")
    print("| workers | GPU-samples | seconds | samples/s | connections per worker | worker CPU s | "
          "server CPU per sample | one core holds | balancer CPU s | load |")
    print("|---:|---:|---:|---:|---|---|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['workers']} | {r['records']:,} | {r['seconds']:.2f} | {r['per_s']:,.0f} | "
              f"{' / '.join(map(str, r['connections']))} | {' / '.join(f'{c:.1f}' for c in r['cpu_s'])} | "
              f"{r['cpu_us_per_sample']:.0f} µs | {r['one_core_per_s']:,.0f} samples/s | "
              f"{r['balancer_cpu_s']:.1f} | {r['load_average']:.1f} |")
    first = runs[0]
    for r in runs[1:]:
        print(f"{r['workers']} workers / {first['workers']}: throughput {r['per_s'] / first['per_s']:.2f}x, "
              f"CPU per sample {r['cpu_us_per_sample'] / first['cpu_us_per_sample']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
