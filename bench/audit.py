"""Audit log benchmark on PostgreSQL, in one run:

1. bulk-load N hash-chained events (COPY FROM STDIN) with a signed checkpoint every 100k;
2. export them all as a CSV bundle through the API, served by daphne on loopback and streamed,
   against PostgreSQL's own ``COPY (SELECT …) TO STDOUT WITH CSV`` of the same rows;
   daphne's peak memory is read for a 10% export and for the full one (flat = equal);
3. ``manage.py verify_audit`` over all of them;
4. audited appends per second: ``record_event`` each in its own committed transaction,
   from 1 writer process and from 8 at once (separate processes, as ASGI and Celery
   workers are), beside the same writers committing a plain one-row INSERT (the peer)
   and the event row alone, sealed, into a copy of the event table with its indexes (the
   floor: what storing the row costs with no chain and no Django model), and the append
   statement alone (``audit_append`` committed as the plain INSERT is: what the chain
   costs in the database, without record_event's Python and after-commit work); once with the transaction ending at the write, once with
   ``--caller-ms`` more work in it; audited writers make the after-commit look through the sealer thread
   (``--seal-delay-ms``, AUDIT_SEAL_DELAY_MS), and once more with the look made at once;
   each run also gives the CPU per event of the writer processes (their sealer threads
   included) and, where PostgreSQL runs on this machine, of all its processes;
   then the whole log verified (one gap-free chain, nothing left pending);
5. the offline verifier (``audit.offline_verify``, no Django, no database) on a whole-log
   JSON Lines bundle, the same as a zip of CSV rows, and a bundle of every tenth record
   with inclusion proofs, beside hashlib's raw SHA-256 of the same records.

    python bench/audit.py                  # 1,000,000 events, scratch DB gpc_bench_audit
    python bench/audit.py --events 200000  # quicker
    python bench/audit.py --append-only    # only step 4
    python bench/audit.py --offline 100000 # only step 5 (no database)

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust auth). Drops and recreates its
scratch database. Prints a JSON summary on the last line.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asgi_servers  # bench/, beside this script
import wsclient

ROOT = Path(__file__).resolve().parent.parent
PG = {"host": "127.0.0.1", "port": "5432", "user": "postgres"}
COLUMNS = "seq, time, actor_type, actor_id, actor_name, team_id, action, target_type, target_id, outcome, source_ip, user_agent, request_id, actor_role, target_name, details, prev_hash, hash"
ACTIONS = [
    "instance.launch",
    "instance.running",
    "instance.stop",
    "instance.stopped",
    "auth.login",
    "member.add",
    "invoice.issue",
]


def setup_django(db: str, var_dir: str) -> dict:
    env = {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{db}",
        "GPUCONSOLE_VAR_DIR": var_dir,
        "INPROCESS_SCHEDULER": "false",
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "false",
        "SECRET_KEY": "bench-" + secrets.token_hex(24),
        "DJANGO_SETTINGS_MODULE": "gpuconsole.settings",
    }
    os.environ.update(env)
    os.environ.pop("REDIS_URL", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    return env


ADMIN = f"postgres://{PG['user']}@{PG['host']}:{PG['port']}/postgres"  # no client programs needed


def recreate_database(db: str) -> None:
    import psycopg

    wsclient.drop_database(ADMIN, db)
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')


def load(n: int, every: int) -> None:
    """N chained events, written with COPY; hashes computed exactly as record_event does."""
    from django.core.management import call_command
    from django.db import connection

    from audit import chain, merkle
    from audit.models import ChainHead
    from audit.treeheads import sign_head
    from console.models import Team

    call_command("migrate", verbosity=0)
    teams = [Team.objects.create(name=f"Bench {i}", slug=f"bench-{i}").pk for i in range(3)]
    rng = random.Random(6)
    start = datetime.now(UTC) - timedelta(days=30)
    step = timedelta(days=29) / n
    prev, tree, heads = chain.GENESIS_HASH, merkle.CompactRange(), []
    began = time.perf_counter()
    connection.ensure_connection()
    with (
        connection.connection.cursor() as cursor,
        cursor.copy(f"COPY audit_auditevent ({COLUMNS}) FROM STDIN") as copy,
    ):
        for seq in range(1, n + 1):
            when = chain.iso_time(start + step * seq)
            team = rng.choice(teams + [None])
            details = {
                "name": f"job-{seq % 5000}",
                "gpu_count": rng.randint(1, 8),
                "from": "pending",
                "to": "running",
            }
            row = (
                seq, when, "user", str(rng.randint(1, 50)), f"user{rng.randint(1, 50)}", team, rng.choice(ACTIONS),
                "instances.instance", str(seq % 9000), "success", f"10.0.{seq % 250}.{seq % 200 + 1}",
                "Mozilla/5.0 (X11; Linux x86_64) bench", secrets.token_hex(16), "", "", details,
            )  # fmt: skip
            digest = chain.link(chain.canonical_row(*row), prev)
            copy.write_row((*row[:15], chain.canonical_details(details), prev, digest))
            prev = digest
            tree.push(merkle.event_leaf(digest))
            if seq % every == 0 or seq == n:
                heads.append(
                    (seq, digest, [h for _, h in tree.pieces], datetime.fromisoformat(when))
                )
    # The bulk load stands in for a year of appends: the loader (the database owner) sets
    # the head directly, which the app's role could not.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_chainhead DISABLE TRIGGER USER")
        ChainHead.objects.update_or_create(id=1, defaults={"seq": n, "hash": prev})
        cursor.execute("ALTER TABLE audit_chainhead ENABLE TRIGGER USER")
    for seq, digest, frontier, when in heads:  # signed once COPY has let go of the connection
        sign_head(seq=seq, head_hash=digest, frontier=frontier, time=when).save(force_insert=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_auditevent")
    print(f"loaded {n:,} events in {time.perf_counter() - began:.1f} s", flush=True)


def api_token() -> str:
    from django.contrib.auth.models import User

    from console import services

    ops = User.objects.create_user("bench-ops", password=secrets.token_hex(8), is_staff=True)
    scopes = ("read", "audit:export")
    return services.create_api_token(actor=ops, user=ops, name="bench", scopes=scopes)[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daphne(env: dict, port: int) -> subprocess.Popen:
    daphne = ROOT / ".venv" / "bin" / "daphne"
    proc = subprocess.Popen(
        [str(daphne), "-b", "127.0.0.1", "-p", str(port), "gpuconsole.asgi:application"],
        cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("daphne did not start: " + proc.stderr.read().decode()[-2000:])


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak(pid: int) -> None:
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def export_via_api(port: int, token: str, query: str, pid: int) -> dict:
    reset_peak(pid)
    before = rss_kib(pid, "VmRSS")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    began = time.perf_counter()
    conn.request(
        "GET",
        f"/api/v1/audit/export/?format=csv{query}",
        headers={"Authorization": f"Token {token}"},
    )
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit(f"export answered {response.status}: {response.read()[:500]!r}")
    size = lines = 0
    first_byte = None
    while chunk := response.read(1 << 20):
        first_byte = first_byte or time.perf_counter() - began
        size += len(chunk)
        lines += chunk.count(b"\n")
    seconds = time.perf_counter() - began
    rows = int(response.getheader("X-Audit-Event-Count"))
    assert lines >= rows + 1, (lines, rows)  # header and rows (stored in the zip as they are)
    return {
        "rows": rows, "bytes": size, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds),
        "first_byte_s": round(first_byte or 0, 3), "rss_before_mib": round(before / 1024, 1),
        "rss_peak_mib": round(rss_kib(pid, "VmHWM") / 1024, 1),
        "through_seq": int(response.getheader("X-Audit-Through-Seq")),
    }  # fmt: skip


def copy_csv(through_seq: int) -> dict:
    from django.db import connection

    sql = (
        f"COPY (SELECT {COLUMNS} FROM audit_auditevent WHERE seq <= {int(through_seq)} ORDER BY seq) "
        "TO STDOUT WITH CSV HEADER"
    )
    size = 0
    began = time.perf_counter()
    connection.ensure_connection()
    with connection.connection.cursor() as cursor, cursor.copy(sql) as copy:
        for block in copy:
            size += len(block)
    seconds = time.perf_counter() - began
    return {
        "rows": through_seq,
        "bytes": size,
        "seconds": round(seconds, 3),
        "rows_per_s": round(through_seq / seconds),
    }


def verify_command(env: dict) -> dict:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "manage.py", "verify_audit"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    summary = done.stdout.strip().splitlines()[-1]
    walk = float(summary.rsplit("; ", 1)[1].split(" s,")[0])
    checked = int(summary.split("summary: ")[1].split(": ")[1].split(" events")[0])
    return {
        "exit_code": done.returncode, "summary": summary, "events": checked, "walk_seconds": walk,
        "walk_events_per_s": round(checked / walk), "command_wall_seconds": round(wall, 2),
        "command_events_per_s": round(checked / wall),
    }  # fmt: skip


PLAIN_TABLE = "bench_plain_write"


ROW_TABLE = "bench_event_row"  # the event table's columns and indexes, no triggers, no chain
ROW_SQL = (
    f"INSERT INTO {ROW_TABLE} (seq, time, actor_type, actor_id, actor_name, actor_role, team_id, action, "
    "target_type, target_id, target_name, outcome, source_ip, user_agent, request_id, details, prev_hash, hash) "
    f"VALUES (nextval('{ROW_TABLE}_seq'), now(), 'system', '', '', '', NULL, 'instance.launch', "
    "'instances.instance', %s, '', 'success', NULL, '', '', %s, %s, %s)"
)
# The append statement alone, committed as the plain peer commits its INSERT: what the
# chain costs in the database, with no record_event, no after-commit look and no head
# published (records it leaves pending are sealed by the audited series' looks that
# follow, and before the log is verified).
CHAIN_SQL = (
    "SELECT o_id FROM audit_append(now(), 'system', '', 'system', NULL, '', 'instance.launch', "
    "'instances.instance', %s, '', 'success', NULL, '', '', %s)"
)
KINDS = ("plain", "row", "chain", "audited")


def _append_worker(env: dict, seconds: float, ready, done, results, kind: str, caller_ms: float) -> None:
    """One writer process (``_append_writes``); if it fails, the barriers are broken so
    that the parent and the other writers stop waiting for it."""
    try:
        _append_writes(env, seconds, ready, done, results, kind, caller_ms)
    except BaseException:
        ready.abort()
        done.abort()
        raise


def _append_writes(env: dict, seconds: float, ready, done, results, kind: str, caller_ms: float) -> None:
    """One writer process: once every writer is set up, append for ``seconds``, each in
    its own committed transaction; reports how many.

    - ``audited``: ``record_event`` (the cheapest audited action);
    - ``plain``, the peer: a one-row INSERT into a narrow table with one index;
    - ``row``, the floor of an audited append: the same event row, sealed (seq and
      hashes given), inserted with plain SQL into a copy of the event table with all its
      indexes: no chain head, no sealing, no Django model;
    - ``chain``: the append statement alone (``audit_append``: the chain head, the
      hash, sealing what waits), in a transaction as the plain one's: no record_event,
      no after-commit look, no head published.

    ``caller_ms``: the rest of the caller's transaction after the write (a server-side
    sleep, no CPU), during which the old design kept the chain head locked."""
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection, transaction

    from audit.recording import record_event

    connection.ensure_connection()
    pid, count = os.getpid(), 0
    ready.wait()
    cpu = time.process_time()  # the writer's own, its sealer thread's included
    until = time.perf_counter() + seconds
    while time.perf_counter() < until and kind == "plain":
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {PLAIN_TABLE} (writer, n, details) VALUES (%s, %s, %s)",
                           [pid, count, json.dumps({"writer": pid, "n": count, "gpu_count": 8, "name": "job"})])
            if caller_ms:
                cursor.execute("SELECT pg_sleep(%s)", [caller_ms / 1000])
        count += 1
    while time.perf_counter() < until and kind == "row":
        with transaction.atomic(), connection.cursor() as cursor:
            details = json.dumps({"gpu_count": 8, "n": count, "name": "job", "writer": pid}, separators=(",", ":"))
            cursor.execute(ROW_SQL, [str(count), details, hashlib.sha256(details.encode()).hexdigest(),
                                     hashlib.sha256(str(count).encode()).hexdigest()])
            if caller_ms:
                cursor.execute("SELECT pg_sleep(%s)", [caller_ms / 1000])
        count += 1
    while time.perf_counter() < until and kind == "chain":
        with transaction.atomic(), connection.cursor() as cursor:
            details = json.dumps({"gpu_count": 8, "n": count, "name": "job", "writer": pid}, separators=(",", ":"))
            cursor.execute(CHAIN_SQL, [str(count), details])
            if caller_ms:
                cursor.execute("SELECT pg_sleep(%s)", [caller_ms / 1000])
        count += 1
    while time.perf_counter() < until and kind == "audited":
        with transaction.atomic():
            record_event(
                actor="system", action="instance.launch", target_type="instances.instance",
                target_id=str(count), details={"writer": pid, "n": count, "gpu_count": 8, "name": "job"},
            )  # fmt: skip
            if caller_ms:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_sleep(%s)", [caller_ms / 1000])
        count += 1
    cpu = time.process_time() - cpu
    done.wait()  # every writer's connections still open while PostgreSQL's CPU is read
    done.wait()
    connection.close()
    results.put((count, cpu))


def append_rate(
    env: dict, writers: int, seconds: float, kind: str = "audited", caller_ms: float = 0, seal_delay_ms: float = 0
) -> dict:
    import multiprocessing

    env = {**env, "AUDIT_SEAL_DELAY_MS": str(int(seal_delay_ms))}
    ctx = multiprocessing.get_context("spawn")
    ready, done, results = ctx.Barrier(writers + 1), ctx.Barrier(writers + 1), ctx.Queue()
    procs = [
        ctx.Process(target=_append_worker, args=(env, seconds, ready, done, results, kind, caller_ms))
        for _ in range(writers)
    ]
    for proc in procs:
        proc.start()
    try:
        ready.wait(timeout=300)  # every writer set up and connected: the clock starts for all at once
        server0 = _postgres_cpu()
        done.wait(timeout=seconds + 120)  # every writer through its loop
        server = _postgres_cpu() - server0 if server0 is not None else None
        done.wait(timeout=60)
        got = [results.get(timeout=seconds + 120) for _ in procs]
    except threading.BrokenBarrierError:
        for proc in procs:
            proc.join(30)
        sys.exit(f"a {kind} writer failed (exit codes {[proc.exitcode for proc in procs]}); its error is above")
    for proc in procs:
        proc.join()
    total, cpu = sum(n for n, _ in got), sum(c for _, c in got)
    return {"writers": writers, "seconds": seconds, "caller_ms": caller_ms, "seal_delay_ms": seal_delay_ms,
            "events": total, "events_per_s": round(total / seconds),
            "writer_cpu_us": round(cpu / max(total, 1) * 1e6),
            "postgres_cpu_us": round(server / max(total, 1) * 1e6) if server is not None else None}


def _postgres_cpu() -> float | None:
    """CPU seconds used so far by every PostgreSQL process of this machine (its
    backends, WAL writer and checkpointer), or None where PostgreSQL runs elsewhere."""
    if PG["host"] not in ("127.0.0.1", "localhost", "::1") or not os.path.isdir("/proc"):
        return None
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"postgres"):
                continue
        except OSError:
            continue
        if (cpu := asgi_servers.process_cpu(int(pid))) is not None:
            found.append(cpu)
    return sum(found) if found else None


def append_bench(env: dict, seconds: float, caller_ms: float, seal_delay_ms: float = 20) -> dict:
    """1 writer vs 8, audited vs a plain one-row INSERT (the peer) and vs the event row
    alone (the floor, see ``_append_worker``), with the caller's
    transaction ending at once and with ``caller_ms`` more work after the write. Audited
    writers make the after-commit look through the sealer thread (``seal_delay_ms``);
    with the caller ending at once, also with the look made at once (``…_look_now``)."""
    from django.db import connection

    from audit.models import AuditEvent
    from audit.sealer import seal_pending
    from audit.verification import verify

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {PLAIN_TABLE} (id bigserial PRIMARY KEY, "
                       "writer int, n int, details json, at timestamptz DEFAULT now())")
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {ROW_TABLE} (LIKE audit_auditevent INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES)")
        cursor.execute(f"CREATE SEQUENCE IF NOT EXISTS {ROW_TABLE}_seq")
    connection.close()
    runs = {}
    for work in (0, caller_ms):
        for kind in KINDS:
            for writers in (1, 8):
                name = f"{kind}_{writers}_{work:g}ms"
                runs[name] = append_rate(env, writers, seconds, kind, work, seal_delay_ms)
    for writers in (1, 8):
        runs[f"audited_{writers}_0ms_look_now"] = append_rate(env, writers, seconds, "audited", 0, 0)
    connection.close()
    seal_pending()  # what the last chain-only writers left waiting, if no look came after
    pending = AuditEvent.objects.filter(seq__isnull=True).count()
    seqs = AuditEvent.objects.filter(seq__isnull=False).order_by("seq").values_list("seq", flat=True)
    report = verify()  # also against every head published outside the database
    heads = _count_lines(os.environ.get("AUDIT_HEADS_FILE", os.path.join(os.environ["GPUCONSOLE_VAR_DIR"], "audit-heads.jsonl")))
    rate = {name: run["events_per_s"] for name, run in runs.items()}
    ratios = {}
    for work in (0, caller_ms):
        for kind in KINDS:
            ratios[f"{kind}_8_vs_1_{work:g}ms"] = round(rate[f"{kind}_8_{work:g}ms"] / rate[f"{kind}_1_{work:g}ms"], 2)
        for writers in (1, 8):
            for kind in ("audited", "chain", "row"):
                ratios[f"{kind}_vs_plain_{writers}_{work:g}ms"] = round(
                    rate[f"{kind}_{writers}_{work:g}ms"] / rate[f"plain_{writers}_{work:g}ms"], 2)
            ratios[f"audited_vs_row_{writers}_{work:g}ms"] = round(
                rate[f"audited_{writers}_{work:g}ms"] / rate[f"row_{writers}_{work:g}ms"], 2)
    for writers in (1, 8):
        ratios[f"audited_look_now_vs_plain_{writers}_0ms"] = round(
            rate[f"audited_{writers}_0ms_look_now"] / rate[f"plain_{writers}_0ms"], 2)
    return {
        "seal_delay_ms": seal_delay_ms, "rates": rate, "ratios": ratios, "runs": runs, "pending_after": pending,
        "gap_free": seqs.count() == seqs.last(), "valid": report.valid, "cpus": os.cpu_count(),
        "events": seqs.count(), "heads_published": heads,
        "load": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip


def heads_bench(n: int, rounds: int = 3) -> dict:
    """What publishing a signed head per sealed batch costs one writer: ``n`` audited
    transactions one after another with no heads, with heads published by the sealer
    thread (the default) and by the committing thread, in ``rounds`` interleaved rounds
    (medians of each mode's rounds); and the window: from a commit to its head on disk,
    one transaction at a time."""
    import statistics

    from django.conf import settings
    from django.db import transaction

    from audit import headlog, publish
    from audit.models import ChainHead
    from audit.recording import record_event
    from audit.sealer import sealer

    path = settings.AUDIT_HEADS_FILE = os.path.join(os.environ["GPUCONSOLE_VAR_DIR"], "audit-heads.jsonl")

    def run(mode: str) -> tuple[float, float]:
        settings.AUDIT_HEADS_FILE = "" if mode == "off" else path
        settings.AUDIT_PUBLISH_IN_THREAD = mode == "thread"
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            with transaction.atomic():
                record_event(actor="system", action="instance.launch", details={"n": i, "gpu_count": 8})
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        sealer.stop()  # the last head written before the next mode
        return wall / n * 1e6, cpu / n * 1e6

    per_tx: dict[str, list] = {"off": [], "thread": [], "committer": []}
    for _ in range(rounds):
        for mode in per_tx:
            per_tx[mode].append(run(mode))
    settings.AUDIT_HEADS_FILE, settings.AUDIT_PUBLISH_IN_THREAD = path, True
    window = []
    for i in range(min(n, 300)):
        with transaction.atomic():
            record_event(actor="system", action="instance.launch", details={"n": i})
        committed = time.perf_counter()
        size = ChainHead.objects.values_list("seq", flat=True).get(id=1)
        while True:
            with open(path, "rb") as handle:
                handle.seek(max(0, os.path.getsize(path) - 2 * headlog.MAX_LINE))
                tail = handle.read().splitlines()
            if tail and tail[-1].endswith(b"}") and json.loads(tail[-1])["tree_size"] >= size:
                break
            time.sleep(0.0002)
        window.append((time.perf_counter() - committed) * 1e3)
    sealer.stop()
    publish.forget()
    window.sort()
    medians = {
        mode: {"wall_us": round(statistics.median(w for w, _ in runs)), "cpu_us": round(statistics.median(c for _, c in runs))}
        for mode, runs in per_tx.items()
    }
    return {
        "transactions": n, "rounds": rounds, "per_transaction": medians,
        "window_ms": {"median": round(statistics.median(window), 2), "p90": round(window[int(len(window) * 0.9)], 2),
                      "max": round(window[-1], 2)},
        "heads": _count_lines(path), "cpus": os.cpu_count(), "load": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(1 for _ in handle)
    except (FileNotFoundError, IsADirectoryError):
        return 0


# --- offline verification beside raw SHA-256 -------------------------------------------


def _bundle_rows(n: int) -> tuple[list[list], list[bytes]]:
    """N chained events as export rows (id first, as ``audit.stream`` gives them) and
    their canonical bytes, hashed exactly as ``record_event`` does."""
    from audit import chain

    rng = random.Random(6)
    start = datetime.now(UTC) - timedelta(days=30)
    step = timedelta(days=29) / n
    prev, rows, canonicals = chain.GENESIS_HASH, [], []
    for seq in range(1, n + 1):
        details = chain.canonical_details(
            {"name": f"job-{seq % 5000}", "gpu_count": rng.randint(1, 8), "from": "pending", "to": "running"}
        )
        fields = [
            chain.iso_time(start + step * seq), "user", str(rng.randint(1, 50)), f"user{rng.randint(1, 50)}",
            rng.choice([1, 2, None]), rng.choice(ACTIONS), "instances.instance", str(seq % 9000), "success",
            f"10.0.{seq % 250}.{seq % 200 + 1}", "Mozilla/5.0 (X11; Linux x86_64) bench", secrets.token_hex(16),
            "member", f"job-{seq % 5000}", details,
        ]  # fmt: skip
        canonical = chain.canonical_text(seq, *fields)
        digest = chain.link(canonical, prev)
        rows.append([seq, seq, *fields, prev, digest])
        canonicals.append(canonical)
        prev = digest
    return rows, canonicals


def _write_bundles(rows: list[list], folder: str) -> tuple[dict[str, str], str]:
    """A whole-log JSON Lines bundle, the same as a zip of CSV rows, and a JSON Lines
    bundle of every tenth record with its proof nodes, as the console writes them."""
    import csv
    import zipfile

    from audit import chain, export, merkle, signing

    n = len(rows)
    tree = merkle.Tree(b"".join(merkle.event_leaf(row[-1]) for row in rows))
    private = signing.load_private(signing.new_private_pem())
    pem, when, root = signing.public_pem(private), chain.iso_time(datetime.now(UTC)), tree.root(n).hex()
    head = {
        "tree_size": n, "root": root, "chain_hash": rows[-1][-1], "time": when,
        "key_fingerprint": signing.fingerprint(pem),
        "signature": signing.sign(private, signing.head_message(n, root, rows[-1][-1], when)),
    }  # fmt: skip
    keys = [{"fingerprint": head["key_fingerprint"], "public_key_pem": pem, "valid_until": None,
             "valid_from": (datetime.now(UTC) - timedelta(days=40)).isoformat()}]  # fmt: skip
    whole = export.manifest(generated_at=when, filters={}, head=head, keys=keys, records=None, nodes=[])
    picked = rows[::10]
    nodes = merkle.covering_nodes([row[1] - 1 for row in picked], n, tree.hash)
    tenth = export.manifest(
        generated_at=when, filters={"sample": "every tenth"}, head=head, keys=keys,
        records=[(row[1], row[-1]) for row in picked], nodes=nodes,
    )  # fmt: skip
    paths = {name: os.path.join(folder, name) for name in ("whole.jsonl", "whole.zip", "tenth.jsonl")}
    for name, manifest, subset in (("whole.jsonl", whole, rows), ("tenth.jsonl", tenth, picked)):
        with open(paths[name], "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"type": "manifest", **manifest}, separators=(",", ":")) + "\n")
            handle.writelines(export.jsonl_line(row) + "\n" for row in subset)
    with zipfile.ZipFile(paths["whole.zip"], "w", zipfile.ZIP_STORED) as bundle:
        with bundle.open("events.csv", "w", force_zip64=True) as member, io_text(member) as text:
            writer = csv.writer(text, lineterminator="\n")
            writer.writerow(export.COLUMNS)
            writer.writerows(export._csv_values(list(row)) for row in rows)
        bundle.writestr("manifest.json", json.dumps(whole))
    return paths, pem


def io_text(member):
    import io

    return io.TextIOWrapper(member, encoding="utf-8", newline="")


def offline_bench(n: int, repeat: int = 3) -> dict:
    """``python -m audit.offline_verify``'s checks on bundles of N events, beside
    hashlib's raw SHA-256 of the same records' canonical bytes (each best of ``repeat``,
    interleaved, since other work on the machine only ever slows a run down)."""
    import hashlib
    import tempfile

    from audit.offline_verify import verify_bundle

    rows, canonicals = _bundle_rows(n)
    sha, tail = hashlib.sha256, b"0" * 64
    with tempfile.TemporaryDirectory() as folder:
        paths, pem = _write_bundles(rows, folder)
        best = {"raw_sha256": 0.0} | {name: 0.0 for name in paths}
        counts = {}
        for _ in range(repeat):
            began = time.perf_counter()
            for canonical in canonicals:
                sha(canonical + tail).digest()
            best["raw_sha256"] = max(best["raw_sha256"], n / (time.perf_counter() - began))
            for name, path in paths.items():
                began = time.perf_counter()
                result = verify_bundle(path, public_pem=pem)
                seconds = time.perf_counter() - began
                if not result.ok:
                    raise SystemExit(f"{name} does not verify: {result.problems[:3]}")
                counts[name] = result.events
                best[name] = max(best[name], result.events / seconds)
    raw = best.pop("raw_sha256")
    return {
        "events": n, "record_bytes": round(sum(map(len, canonicals)) / n), "raw_sha256_per_s": round(raw),
        "bundles": {name: {"records": counts[name], "records_per_s": round(rate), "vs_raw_sha256": round(rate / raw, 3)}
                    for name, rate in best.items()},
        "load": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--db", default="gpc_bench_audit")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--append-only", action="store_true", help="only the concurrent append step"
    )
    parser.add_argument("--append-seconds", type=float, default=5.0)
    parser.add_argument(
        "--caller-ms", type=float, default=5.0,
        help="work in the caller's transaction after the audited write (second series)",
    )
    parser.add_argument(
        "--seal-delay-ms", type=int, default=20,
        help="AUDIT_SEAL_DELAY_MS of the audited writers (the look after commit, by the sealer thread)",
    )
    parser.add_argument(
        "--heads", type=int, metavar="N",
        help="only the cost of publishing signed heads: N audited transactions per mode and round, and the window",
    )
    parser.add_argument(
        "--offline", type=int, metavar="N",
        help="only the offline verifier on bundles of N events, beside raw SHA-256 (no database)",
    )
    args = parser.parse_args()
    if args.seal_delay_ms < 0:
        parser.error("--seal-delay-ms must be 0 or more")
    if args.offline:
        sys.path.insert(0, str(ROOT))
        offline = offline_bench(args.offline)
        for name, figures in offline["bundles"].items():
            print(f"offline verify {name}: {figures['records']:,} records, {figures['records_per_s']:,}/s "
                  f"= {figures['vs_raw_sha256']}x raw SHA-256 ({offline['raw_sha256_per_s']:,}/s)")
        print(json.dumps({"date": datetime.now(UTC).strftime("%Y-%m-%d"), "offline": offline}))
        return
    if args.heads:
        recreate_database(args.db)
        var_dir = f"/tmp/{args.db}-var"
        os.makedirs(var_dir, exist_ok=True)
        if os.path.exists(f"{var_dir}/audit-heads.jsonl"):
            os.remove(f"{var_dir}/audit-heads.jsonl")
        setup_django(args.db, var_dir)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        heads = heads_bench(args.heads)
        _drop(args)
        for mode, figures in heads["per_transaction"].items():
            print(f"  heads {mode:>9}: {figures['wall_us']:,} us a transaction ({figures['cpu_us']:,} us CPU)")
        print(f"commit to head on disk: median {heads['window_ms']['median']} ms, p90 {heads['window_ms']['p90']} ms, "
              f"max {heads['window_ms']['max']} ms; load {heads['load']}")
        print(json.dumps({"date": datetime.now(UTC).strftime("%Y-%m-%d"), "heads": heads}))
        return
    if args.append_only:
        recreate_database(args.db)
        var_dir = f"/tmp/{args.db}-var"
        os.makedirs(var_dir, exist_ok=True)
        if os.path.exists(f"{var_dir}/audit-heads.jsonl"):  # the heads of the database just dropped
            os.remove(f"{var_dir}/audit-heads.jsonl")
        env = setup_django(args.db, var_dir)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        appended = append_bench(env, args.append_seconds, args.caller_ms, args.seal_delay_ms)
        _drop(args)
        _print_append(appended)
        print(json.dumps({"date": datetime.now(UTC).strftime("%Y-%m-%d"), "append": appended}))
        return
    if args.events < 10_000:
        parser.error("--events must be at least 10000")
    recreate_database(args.db)
    var_dir = f"/tmp/{args.db}-var"
    os.makedirs(var_dir, exist_ok=True)
    if os.path.exists(f"{var_dir}/audit-heads.jsonl"):  # the heads of the database just dropped
        os.remove(f"{var_dir}/audit-heads.jsonl")
    env = setup_django(args.db, var_dir)
    load(args.events, every=100_000)
    token = api_token()
    port = free_port()
    daphne = start_daphne(env, port)
    try:
        tenth = (datetime.now(UTC) - timedelta(days=30) + timedelta(days=29) / 10).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        small = export_via_api(port, token, f"&until={tenth}", daphne.pid)
        full = export_via_api(port, token, "", daphne.pid)
        copy = copy_csv(full["through_seq"])
    finally:
        daphne.terminate()
        daphne.wait(10)
    verified = verify_command(env)
    appended = append_bench(env, args.append_seconds, args.caller_ms, args.seal_delay_ms)
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "events": args.events, "export_api_small": small,
        "export_api": full, "copy": copy, "export_vs_copy": round(full["rows_per_s"] / copy["rows_per_s"], 3),
        "verify": verified, "append": appended,
    }  # fmt: skip
    _drop(args)
    print(
        f"export via API: {full['rows']:,} rows in {full['seconds']} s ({full['rows_per_s']:,}/s), "
        f"COPY: {copy['seconds']} s ({copy['rows_per_s']:,}/s) -> {result['export_vs_copy']}x COPY; "
        f"daphne peak RSS {small['rss_peak_mib']} MiB (10%) vs {full['rss_peak_mib']} MiB (100%); "
        f"verify_audit walk {verified['walk_events_per_s']:,} events/s"
    )
    _print_append(appended)
    print(json.dumps(result))


def _drop(args) -> None:
    if args.keep:
        return
    from django.db import connections

    connections.close_all()
    wsclient.drop_database(ADMIN, args.db)


def _print_append(appended: dict) -> None:
    for name, rate in appended["rates"].items():
        run = appended["runs"][name]
        server = f", PostgreSQL {run['postgres_cpu_us']:,} us" if run.get("postgres_cpu_us") is not None else ""
        print(f"  {name:>20}: {rate:,} transactions/s; CPU per event: writers {run['writer_cpu_us']:,} us{server}")
    for name, ratio in appended["ratios"].items():
        print(f"  {name:>28}: {ratio}x")
    print(
        f"audited appends on {appended['cpus']} CPUs, load {appended['load']}: pending after "
        f"{appended['pending_after']}, log gap-free {appended['gap_free']}, verifies {appended['valid']}; "
        f"{appended['heads_published']:,} signed heads published for {appended['events']:,} events"
    )


if __name__ == "__main__":
    main()
