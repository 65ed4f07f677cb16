"""The production mode, run for real: PostgreSQL + Redis, two daphne workers, a Celery
worker and beat, a replay agent on one worker and live browser clients on the other.

    DATABASE_URL=postgres://… REDIS_URL=redis://… .venv/bin/python tests/production/production_mode.py [--seconds 60]

It migrates a scratch database (created beside DATABASE_URL's, dropped at the end),
seeds an operator and a host with its token, then starts everything as the README's
deployment section does. For ``--seconds`` the replay agent streams the recorded H200
trace into worker A while on worker B

- a browser-protocol client (the operator's session cookie, the page's Origin)
  subscribes to the fleet and to the host, two groups that both carry every reading
  (readings stored before its subscriptions were answered are not expected);
- an idle client subscribes to a team with no GPUs and hears nothing the whole run.

It fails (exit 1, naming each failure) on: any close of a live client or of the agent
during the run; a 1011 or 4500 close (server error) or a Redis timeout in any log; a reading delivered twice to the
client; a stored reading that the client got neither itself nor superseded within
``COVER_S`` by a newer one of the same GPU (readings are coalesced per interval; the
count starts at the first reading the client got of that GPU); no
1-minute rollup built or no audit checkpoint written by the Celery beat + worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import wsclient  # noqa: E402 (the harnesses' websocket clients)

BIN = Path(sys.executable).parent
TRACE = ROOT / "agent" / "traces" / "h200_mixed.jsonl"
HOST = "prod-replay"
COVER_S = 1.0
SETTLE_S = 120  # after the run: how long rollups and checkpoints may take to appear
BAD_LOG = re.compile(r"\b1011\b|4500 server error|Timeout reading from|TimeoutError|Traceback")

SEED = f"""
import json
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_totp.models import TOTPDevice
from console.models import Team
from instances.models import GpuModel, Region
from instances.inventory import register_host
from monitoring import services
ops = User.objects.create_user("ops", is_staff=True)
device = TOTPDevice.objects.create(user=ops, name="authenticator", confirmed=True)  # the operator's second factor
region = Region.objects.create(name="prod-1")
GpuModel.objects.get_or_create(name="H200", defaults=dict(memory_gb=141, power_limit_w=700))
host = register_host(actor=ops, name="{HOST}", region=region)
token = services.create_host_token(actor=ops, host=host)[1]
idle = Team.objects.create(name="Idle", slug="idle")
sessions = []
for _ in range(2):
    s = SessionStore()
    s[SESSION_KEY] = str(ops.pk)
    s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    s[HASH_SESSION_KEY] = ops.get_session_auth_hash()
    s[DEVICE_ID_SESSION_KEY] = device.persistent_id
    s.create()
    sessions.append(s.session_key)
print(json.dumps({{"token": token, "sessions": sessions, "host": host.pk, "idle_team": idle.pk}}))
"""

REPORT = f"""
import json
from audit.models import Checkpoint
from monitoring.models import Rollup1m, Sample
samples = [(s.gpu.uuid, s.time.timestamp()) for s in Sample.objects.filter(gpu__host__name="{HOST}").select_related("gpu")]
print(json.dumps({{"samples": samples, "rollups_1m": Rollup1m.objects.filter(gpu__host__name="{HOST}").count(),
                  "checkpoints": Checkpoint.objects.count()}}))
"""

SETTINGS = """
from gpuconsole.settings import *  # noqa: F403
ROLLUP_DELAY_S = 2  # close 1-minute buckets 2 s after their end, so a short run sees one built
"""


def manage(env: dict, *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"manage.py {args[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


class Client:
    """A browser-protocol live client: what it heard and how it ended."""

    def __init__(self, name: str, url: str, session: str, origin: str, subscriptions: list[dict]):
        self.name, self.url, self.session, self.origin = name, url, session, origin
        self.subscriptions = subscriptions
        self.readings: Counter = Counter()
        self.messages = 0
        self.closed: str | None = None
        self.ready_at = float("inf")  # when every subscription was answered (wall clock)

    async def run(self, until: float) -> None:
        from websockets.exceptions import ConnectionClosed

        loop = asyncio.get_running_loop()
        try:
            async with wsclient.browser(self.url, self.session, self.origin) as ws:
                await wsclient.subscribe(ws, self.subscriptions)
                self.ready_at = time.time()
                while loop.time() < until:
                    try:
                        text = await asyncio.wait_for(ws.recv(), max(0.05, until - loop.time()))
                    except TimeoutError:
                        break
                    message = json.loads(text)
                    if message["event"] == "gpus":
                        self.messages += 1
                        for gpu in message["data"]["gpus"]:
                            self.readings[(gpu["uuid"], datetime.fromisoformat(gpu["t"]).timestamp())] += 1
        except ConnectionClosed as exc:
            self.closed = f"closed with {wsclient.close_code(exc)}"
        except OSError as exc:
            self.closed = f"could not connect: {exc}"


def start(procs: list, name: str, cmd: list[str], env: dict, logs: Path) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(logs / f"{name}.log", "w"), stderr=subprocess.STDOUT)
    procs.append((name, proc))
    return proc


def stop_all(procs: list) -> None:
    for _, proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    for _, proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def run(args, env: dict, var: Path) -> list[str]:
    logs = var / "logs"
    logs.mkdir()
    manage(env, "migrate", "--noinput", "-v0")
    seed = json.loads(manage(env, "shell", "-v0", "-c", SEED).strip().splitlines()[-1])
    (var / "token").write_text(seed["token"])
    procs: list = []
    failures: list[str] = []
    try:
        ports = wsclient.free_ports(2)
        daphne = [str(BIN / "daphne"), "-b", "127.0.0.1", "--websocket-max-message-size", str(512 * 1024)]
        workers = [start(procs, f"daphne-{i}", [*daphne, "-p", str(port), "gpuconsole.asgi:application"], env, logs)
                   for i, port in enumerate(ports)]
        celery = [sys.executable, "-m", "celery", "-A", "gpuconsole"]
        start(procs, "celery-worker", [*celery, "worker", "-l", "info", "--concurrency", "2"], env, logs)
        start(procs, "celery-beat", [*celery, "beat", "-l", "info"], env, logs)
        for worker, port in zip(workers, ports, strict=True):
            wsclient.wait_http(f"http://127.0.0.1:{port}/healthz", worker, timeout=180)
        origin = f"http://127.0.0.1:{ports[1]}"
        live = Client("live", f"ws://127.0.0.1:{ports[1]}/ws/live/", seed["sessions"][0], origin,
                      [{"kind": "fleet"}, {"kind": "host", "id": seed["host"]}])
        idle = Client("idle", f"ws://127.0.0.1:{ports[1]}/ws/live/", seed["sessions"][1], origin,
                      [{"kind": "team", "id": seed["idle_team"]}])
        agent = start(procs, "agent", [
            str(BIN / "gpuconsole-agent"), "--server", f"ws://127.0.0.1:{ports[0]}/ws/agent/",
            "--token-file", str(var / "token"), "--backend", "replay", "--trace", str(TRACE),
            "--host", HOST, "--spool-dir", str(var / "spool"), "--log-level", "info",
        ], env, logs)
        print(f"streaming for {args.seconds:.0f} s: agent → worker :{ports[0]}, live clients ← worker :{ports[1]}")

        async def clients():
            until = asyncio.get_running_loop().time() + args.seconds
            await asyncio.gather(live.run(until), idle.run(until))

        started = time.monotonic()
        asyncio.run(clients())
        held = time.monotonic() - started
        for name, proc in procs:  # every server, worker, beat and the agent ran to the end
            if proc.poll() is not None:
                failures.append(f"{name} exited with {proc.returncode} during the run")
        agent.terminate()
        agent.wait(timeout=20)
        for client in (live, idle):
            if client.closed:
                failures.append(f"{client.name} client {client.closed}")
        report = settle(env, failures)
        failures += check_readings(live, report["samples"])
        print(f"live client: {live.messages} gpus messages, {sum(live.readings.values())} readings over "
              f"{held:.0f} s; idle client held {held:.0f} s{' (closed)' if idle.closed else ' open'}; "
              f"stored readings {len(report['samples'])}; 1-minute rollups {report['rollups_1m']}; "
              f"audit checkpoints {report['checkpoints']}")
    finally:
        stop_all(procs)
    for path in sorted(logs.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if BAD_LOG.search(line):
                failures.append(f"{path.name}: {line.strip()[:300]}")
    if failures:
        kept = ROOT / "test-artifacts" / "production-mode"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(logs, kept)
        print(f"logs kept in {kept}")
    return failures


def settle(env: dict, failures: list[str]) -> dict:
    """Wait for the beat-driven work; the report of what is stored."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        report = json.loads(manage(env, "shell", "-v0", "-c", REPORT).strip().splitlines()[-1])
        if (report["rollups_1m"] and report["checkpoints"]) or time.monotonic() > deadline:
            break
        time.sleep(5)
    if not report["rollups_1m"]:
        failures.append(f"no 1-minute rollup was built within {SETTLE_S} s of the run (Celery beat + worker)")
    if not report["checkpoints"]:
        failures.append(f"no audit checkpoint was written within {SETTLE_S} s of the run (Celery beat + worker)")
    return report


def check_readings(live: Client, samples: list) -> list[str]:
    failures = []
    twice = [key for key, count in live.readings.items() if count > 1]
    if twice:
        failures.append(f"{len(twice)} readings delivered more than once, e.g. {twice[:3]}")
    if not samples:
        failures.append("no reading was stored")
    if samples and not live.readings:
        failures.append("the live client got no reading at all")
    delivered: dict[str, list[float]] = {}
    for uuid, t in live.readings:
        delivered.setdefault(uuid, []).append(t)
    last = max((t for _, t in live.readings), default=0.0)
    first = {uuid: min(times) for uuid, times in delivered.items()}
    # From the first reading the client got of a GPU (the agent's first frame carries what
    # it sampled while connecting, coalesced to its newest) to the end of the run.
    missing = [
        (uuid, t) for uuid, t in samples
        if max(live.ready_at, first.get(uuid, 0.0)) <= t <= last - COVER_S and not any(t - 1e-6 <= d <= t + COVER_S for d in delivered.get(uuid, []))
    ]
    if missing:
        failures.append(f"{len(missing)} stored readings never reached the client (nor a newer one within "
                        f"{COVER_S} s), e.g. {missing[:3]}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to stream (default 60)")
    args = parser.parse_args()
    database_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not database_url.startswith("postgres") or not redis_url:
        print("production mode needs DATABASE_URL (PostgreSQL) and REDIS_URL", file=sys.stderr)
        return 2
    admin, name, url = wsclient.scratch_database(database_url, "prodmode")
    try:
        with tempfile.TemporaryDirectory(prefix="prodmode-") as tmp:
            var = Path(tmp)
            (var / "prodmode_settings.py").write_text(SETTINGS)
            env = os.environ | {
                "DATABASE_URL": url, "GPUCONSOLE_VAR_DIR": str(var), "PYTHONUNBUFFERED": "1",
                "DJANGO_SETTINGS_MODULE": "prodmode_settings",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(var), str(ROOT), os.environ.get("PYTHONPATH")])),
                "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(48), "SECURE_SSL_REDIRECT": "false",
                "ALLOWED_HOSTS": "127.0.0.1,localhost", "AUDIT_CHECKPOINT_SECONDS": "10",
            }
            env.pop("INPROCESS_SCHEDULER", None)
            failures = run(args, env, var)
    finally:
        wsclient.drop_database(admin, name)
    for failure in failures:
        print(f"FAIL {failure}")
    print("production mode: " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
