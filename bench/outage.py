"""Outage: the server is killed mid-stream and restarted after a while; afterwards the
database holds exactly the samples the agents produced: none lost, none twice.

    python bench/outage.py                  # a 60 s outage, 4 hosts x 8 GPUs every 0.2 s
    python bench/outage.py --down 10 --hosts 2

Real ``gpuconsole-agent`` processes (sim backend, one per run, a fleet file with a
token per host) stream into daphne on PostgreSQL. The server gets SIGKILL (no clean
shutdown: transactions in flight are lost with it), stays down ``--down`` seconds,
and comes back; the agents, which spooled everything meanwhile, reconnect, replay
their spools and carry on. Then the agents are stopped (SIGTERM: they spool what they
sampled last) and the books are balanced, per host:

    produced = stored + still spooled,  where stored = the high seq the server keeps,
    and the database holds exactly ``stored`` rows for the host, no (GPU, time) twice.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ingest import PYTHON, Database, Server, free_port  # noqa: E402

from agent.backends.sim import SimSource  # noqa: E402


def fleet_file(path: Path, sim: SimSource, tokens: dict[str, str]) -> None:
    hosts = [{"host": h.host, "token": tokens[h.host], "gpus": [g.hello() for g in h.gpus]} for h in sim.fleet]
    for host in hosts:
        for gpu in host["gpus"]:
            del gpu["mig_mode"], gpu["slices"]
    path.write_text(json.dumps(hosts))
    path.chmod(0o600)


def spool_left(spool_root: Path, host: str) -> tuple[int, int | None, int | None, list[str]]:
    """(records, lowest seq, highest seq, boot_ids) still in a host's spool."""
    path = spool_root / host / "spool.sqlite3"
    if not path.exists():
        return 0, None, None, []
    with sqlite3.connect(path) as conn:
        count, low, high = conn.execute("SELECT count(*), min(seq), max(seq) FROM records").fetchone()
        boots = [row[0] for row in conn.execute("SELECT DISTINCT boot_id FROM records")]
    return count, low, high, boots


def wait_until(predicate, timeout: float, what: str) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if predicate():
            return time.monotonic() - began
        time.sleep(0.5)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--down", type=float, default=60.0, help="seconds the server stays down (default 60)")
    parser.add_argument("--before", type=float, default=10.0, help="seconds of streaming before the kill")
    parser.add_argument("--after", type=float, default=10.0, help="seconds of streaming after the recovery")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=0.2, help="agent --interval (default 0.2 s)")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-outage-"))
    db = Database("postgresql", args.pg, work)
    agent = None
    server = None
    result = {"date": time.strftime("%Y-%m-%d"), "down_s": args.down, "hosts": args.hosts, "gpus": args.gpus,
              "interval_s": args.interval}
    try:
        db.create()
        sim = SimSource.synthetic(args.hosts, args.gpus, prefix="outage-host", seed=3)
        tokens = db.prepare([h.host for h in sim.fleet])
        fleet = work / "fleet.json"
        fleet_file(fleet, sim, tokens)
        server = Server(db, free_port())
        server.start()
        spool = work / "spool"
        agent = subprocess.Popen(
            [PYTHON, "-m", "agent", "--server", f"ws://127.0.0.1:{server.port}/ws/agent/",
             "--backend", "sim", "--fleet", str(fleet), "--interval", str(args.interval),
             "--slow-interval", "1", "--spool-dir", str(spool), "--log-level", "warning"],
            cwd=REPO, stdout=open(work / "agent.log", "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
            start_new_session=True,
        )

        def stored() -> int:
            return db.query("SELECT count(*) FROM monitoring_sample")[0][0]

        wait_until(lambda: stored() > 0, 60, "the first samples")
        time.sleep(args.before)
        before_kill = stored()
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait()
        killed_at = time.monotonic()
        print(f"killed the server with {before_kill} samples stored; down for {args.down:.0f} s")
        time.sleep(args.down)
        server.start()
        restarted_at = time.monotonic()
        # Caught up: every host's spool holds no more than two seconds of sampling.
        steady = 2 * args.gpus / args.interval
        caught_up = wait_until(
            lambda: all(spool_left(spool, h.host)[0] <= steady for h in sim.fleet), 240, "the spools to drain"
        )
        print(f"back up; the agents caught up {caught_up:.1f} s after the restart")
        time.sleep(args.after)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        server.stop()
        result |= balance(db, sim, spool)
        result |= {"killed_after_s": args.before, "stored_before_kill": before_kill,
                   "caught_up_s": caught_up, "outage_s": restarted_at - killed_at}
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
        if server is not None:
            server.stop()
        db.drop()
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 else 1


def balance(db: Database, sim: SimSource, spool: Path) -> dict:
    sessions = dict(db.query(
        "SELECT h.name, s.last_seq FROM monitoring_agentsession s JOIN instances_host h ON h.id = s.host_id"
    ))
    rows = dict(db.query(
        "SELECT h.name, count(*) FROM monitoring_sample s JOIN instances_gpu g ON g.id = s.gpu_id "
        "JOIN instances_host h ON h.id = g.host_id GROUP BY h.name"
    ))
    events = dict(db.query(
        "SELECT h.name, count(*) FROM monitoring_gpuevent e JOIN instances_host h ON h.id = e.host_id "
        "WHERE e.kind = 'xid' GROUP BY h.name"
    ))
    twice = db.query(
        "SELECT count(*) FROM (SELECT gpu_id, time FROM monitoring_sample GROUP BY gpu_id, time HAVING count(*) > 1) d"
    )[0][0]
    produced = stored = left = lost = acked_in_spool = 0
    for host in (h.host for h in sim.fleet):
        high = sessions.get(host, 0)
        count, low, top, _ = spool_left(spool, host)
        # The spool holds one run of seqs; it may still hold a few the server stored
        # just before the agent stopped (their ack was not applied): sent again on the
        # next start, they are recognised as duplicates.
        if count and (low > high + 1 or top - low + 1 != count):
            raise SystemExit(f"{host}: the spool holds seqs {low}..{top} ({count} records) after ack {high}")
        held = rows.get(host, 0) + events.get(host, 0)
        lost += max(0, high - held)
        produced += max(high, top or 0)
        stored += held
        left += max(0, (top or 0) - high)
        acked_in_spool += 0 if not count else max(0, min(top, high) - low + 1)
    return {"produced": produced, "stored": stored, "still_spooled": left, "acked_still_in_spool": acked_in_spool,
            "lost": lost, "duplicated": twice + max(0, stored - (produced - left))}


def report(r: dict) -> None:
    print(f"outage benchmark, {r['date']}: {r['hosts']} hosts x {r['gpus']} GPUs every {r['interval_s']} s, "
          f"server killed (SIGKILL) after {r['killed_after_s']:.0f} s and restarted {r['outage_s']:.0f} s later")
    print(f"  records produced by the agents  {r['produced']:>9}")
    print(f"  stored in PostgreSQL            {r['stored']:>9}")
    print(f"  still in the agents' spools     {r['still_spooled']:>9}   (not stored yet: sent on the next start)")
    print(f"  stored, ack not yet applied     {r['acked_still_in_spool']:>9}   (in the spool too: dropped as duplicates when resent)")
    print(f"  lost                            {r['lost']:>9}")
    print(f"  duplicated                      {r['duplicated']:>9}")
    print(f"  caught up {r['caught_up_s']:.1f} s after the restart")


if __name__ == "__main__":
    sys.exit(main())
