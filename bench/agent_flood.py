"""daphne's memory under an agent that floods /ws/agent/ without waiting for acks,
against the same run with an agent that waits for each ack (the peer).

    .venv/bin/python bench/agent_flood.py [--seconds 30] [--records 200]

Each side gets a fresh daphne (gpuconsole.asgi, the embedded default: SQLite, in-memory
channel layer) on a scratch database with one host of 8 GPUs. The flooding agent sends
samples frames of ``--records`` records back to back and never reads; when the server
closes it (4429) it reconnects and goes on, as a hostile client would. The peer sends
the same frames one at a time, each after the previous one's ack. Reported: daphne's
RSS before, its peak during and after the ``--seconds`` run, frames and bytes sent, and
the close codes the agent saw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

import wsclient  # noqa: E402 (bench/, beside this script)

from agent import protocol  # noqa: E402

HOST = "flood-host"
UUIDS = [f"GPU-flood-{i}" for i in range(8)]
SEED = f"""
from django.contrib.auth.models import User
from instances.models import GpuModel, Host, Region
from monitoring import services
ops = User.objects.create_user("ops", is_staff=True)
region = Region.objects.create(name="bench-1")
GpuModel.objects.create(name="H100-80GB", memory_gb=80, power_limit_w=700)
host = Host.objects.create(name="{HOST}", region=region)
print(services.create_host_token(actor=ops, host=host)[1])
"""


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Frames:
    """Samples frames with increasing seq, all of one boot."""

    def __init__(self, records: int):
        self.records = records
        self.seq = 0
        self.boot_id = secrets.token_hex(16)

    def hello(self) -> str:
        gpus = [{"uuid": u, "index": i, "name": "H100-80GB", "memory_total": 80 * 2**30, "mig_mode": False,
                 "slices": []} for i, u in enumerate(UUIDS)]
        return protocol.hello_frame(host=HOST, boot_id=self.boot_id, backend="sim", gpus=gpus)

    def next(self) -> str:
        bodies = []
        now = time.time()
        for _ in range(self.records):
            self.seq += 1
            bodies.append(protocol.dumps({"seq": self.seq, "t": now, "gpu": UUIDS[self.seq % 8],
                                          "m": {"gpu_util": self.seq % 100, "mem_used": 2**30, "power_mw": 300000,
                                                "temp_c": 50, "sm_clock_mhz": 1980}}))
        return protocol.samples_frame(self.boot_id, bodies)


async def agent(url: str, token: str, records: int, seconds: float, wait_for_acks: bool) -> dict:
    from websockets.exceptions import ConnectionClosed

    frames, closes = Frames(records), Counter()
    sent = sent_bytes = acked = 0
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while loop.time() < until:
        try:
            async with wsclient.agent(url, token, max_size=2**22, open_timeout=30) as ws:
                await ws.send(frames.hello())
                json.loads(await ws.recv())
                while loop.time() < until:
                    text = frames.next()
                    await asyncio.wait_for(ws.send(text), max(0.01, until - loop.time()))
                    sent, sent_bytes = sent + 1, sent_bytes + len(text)
                    if wait_for_acks:
                        while json.loads(await ws.recv())["type"] != "ack":
                            pass
                        acked += 1
        except ConnectionClosed as exc:
            closes[wsclient.close_code(exc)] += 1
        except TimeoutError:
            closes["send still blocked at the end"] += 1
    return {"frames": sent, "bytes": sent_bytes, "acked": acked, "closes": dict(closes)}


def side(name: str, env: dict, var: Path, token: str, args, wait_for_acks: bool) -> dict:
    port = wsclient.free_port()
    server = subprocess.Popen(
        [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "gpuconsole.asgi:application"],
        cwd=ROOT, env=env, stdout=open(var / f"daphne-{name}.log", "w"), stderr=subprocess.STDOUT,
    )
    try:
        wsclient.wait_http(f"http://127.0.0.1:{port}/healthz", server)
        time.sleep(2)
        before = rss_kib(server.pid)
        peak, stop = [before], threading.Event()

        def watch():
            while not stop.wait(0.25):
                peak.append(rss_kib(server.pid))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        result = asyncio.run(agent(f"ws://127.0.0.1:{port}/ws/agent/", token, args.records, args.seconds,
                                   wait_for_acks))
        time.sleep(3)  # what the server still holds once the agent is gone
        stop.set()
        watcher.join()
        return {**result, "before": before, "peak": max(peak), "after": rss_kib(server.pid)}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--records", type=int, default=200, help="records per frame, 1-500 (default 200)")
    args = parser.parse_args()
    if not (5 <= args.seconds <= 300 and 1 <= args.records <= 500):
        parser.error("--seconds 5-300, --records 1-500")
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp:
        var = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env |= {"GPUCONSOLE_VAR_DIR": str(var), "INPROCESS_SCHEDULER": "false", "PYTHONUNBUFFERED": "1",
                "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(48), "SECURE_SSL_REDIRECT": "false"}
        manage = [sys.executable, str(ROOT / "manage.py")]
        for step in (["migrate", "--noinput", "-v0"], ["shell", "-v0", "-c", SEED]):
            done = subprocess.run(manage + step, cwd=ROOT, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"manage.py {step[0]} failed:\n{done.stderr[-3000:]}")
        token = done.stdout.strip().splitlines()[-1]
        frame_kib = len(Frames(args.records).next()) / 1024
        print(f"{args.seconds:.0f} s per side, frames of {args.records} records ({frame_kib:.0f} KiB), "
              "daphne on SQLite with the in-memory channel layer")
        results = {"ack-waiting": side("acks", env, var, token, args, True),
                   "flood": side("flood", env, var, token, args, False)}
    print(f"{'agent':12} {'frames':>7} {'MiB sent':>9} {'acked':>6} {'RSS before':>11} {'peak':>9} "
          f"{'after':>9}  closes")
    for name, r in results.items():
        print(f"{name:12} {r['frames']:>7} {r['bytes'] / 2**20:>9.1f} {r['acked']:>6} {r['before'] / 1024:>9.0f} MB "
              f"{r['peak'] / 1024:>6.0f} MB {r['after'] / 1024:>6.0f} MB  {r['closes'] or '-'}")
    flood, peer = results["flood"], results["ack-waiting"]
    print(f"flood / ack-waiting: peak RSS ×{flood['peak'] / peer['peak']:.2f}, "
          f"growth {(flood['peak'] - flood['before']) / 1024:+.0f} MB vs {(peer['peak'] - peer['before']) / 1024:+.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
