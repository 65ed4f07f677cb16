"""Under a real daphne, an agent whose host token expires while it is connected gets
``token_expired`` and the socket closes with 4440: daphne's websocket library refuses
any close code from the application other than 1000 and 3000-4999, so a 1013 left the
socket open."""

import asyncio
import json
import os
import subprocess
import sys

import pytest
import websockets
from daphne_support import ROOT, free_port
from telemetry_wire import hello

from agent import protocol

SEED = """
from datetime import timedelta
from django.utils import timezone
from instances.models import Host, Region
from monitoring.models import HostToken
from monitoring.services import create_host_token
host = Host.objects.create(name="h-expiring", region=Region.objects.create(name="r1"))
token, raw = create_host_token(actor=None, host=host)
HostToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() + timedelta(seconds=12))
print(raw)
"""


@pytest.fixture
def served(tmp_path):
    """A migrated SQLite console under daphne; yields (ws URL, a token expiring in 12 s,
    time for the seeding process to exit and the agent to connect on busy cores)."""
    env = os.environ | {"GPUCONSOLE_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": "",
                        "INPROCESS_SCHEDULER": "false"}
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "gpuconsole.asgi:application"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        asyncio.run(_wait_for(port, proc))
        seed = subprocess.run([*manage, "shell", "-c", SEED], cwd=ROOT, env=env, check=True,
                              capture_output=True, text=True)
        yield f"ws://127.0.0.1:{port}/ws/agent/", seed.stdout.strip().splitlines()[-1]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def _wait_for(port, proc):
    for _ in range(300):
        assert proc.poll() is None, proc.stderr.read().decode()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise AssertionError("daphne did not start")


async def _until_closed(url, token):
    headers = {"Authorization": f"Bearer {token}"}
    async with websockets.connect(url, additional_headers=headers) as ws:
        await ws.send(json.dumps(hello(host="h-expiring", gpus=[])))
        frames = [json.loads(await asyncio.wait_for(ws.recv(), 10))]
        try:
            while True:
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        except websockets.ConnectionClosed as closed:
            return frames, closed.rcvd.code if closed.rcvd else 1006


def test_an_expiring_token_closes_the_connected_agent_with_4440(served):
    url, token = served
    frames, code = asyncio.run(_until_closed(url, token))
    assert frames[0]["type"] == "welcome"
    assert frames[-1]["code"] == "token_expired"
    assert code == protocol.CLOSE_TOKEN_EXPIRED == 4440
    assert protocol.close_action(code) == protocol.RETRY
