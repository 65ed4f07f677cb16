"""Helpers for telemetry tests: agent frames, an agent over an in-process websocket,
raw samples."""

from __future__ import annotations

import json
import secrets
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from monitoring.catalog import RAW_METRICS
from monitoring.ingest import insert_samples
from monitoring.routing import websocket_urlpatterns

TRACE = Path(__file__).resolve().parents[2] / "agent" / "traces" / "h200_mixed.jsonl"
APP = URLRouter(websocket_urlpatterns)


def hello(host="h100-a", gpus=None, boot_id=None, **extra) -> dict:
    if gpus is None:
        gpus = [gpu_entry(f"GPU-{host}-{i}", i) for i in range(8 if host.startswith("h100") else 1)]
    return {"type": "hello", "v": 1, "host": host, "boot_id": boot_id or BOOT, "agent": "test/1",
            "backend": "sim", "gpus": gpus, **extra}


def gpu_entry(uuid, index, name="H100-80GB", memory_total=80 * 2**30, **extra) -> dict:
    return {"uuid": uuid, "index": index, "name": name, "memory_total": memory_total, "mig_mode": False,
            "slices": [], **extra}


BOOT = "0123456789abcdef0123456789abcdef"


def record(seq, gpu="GPU-h100-a-0", t=None, **m) -> dict:
    return {"seq": seq, "t": time.time() if t is None else t, "gpu": gpu, "m": m or {"gpu_util": 50.0}}


def samples(records, boot_id=BOOT) -> dict:
    return {"type": "samples", "v": 1, "boot_id": boot_id, "records": records}


class Agent:
    """One agent connection: send frames, read server frames."""

    def __init__(self, token: str | None, path="/ws/agent/", headers=None):
        headers = list(headers or [])
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        self.ws = WebsocketCommunicator(APP, path, headers=headers)

    async def __aenter__(self):
        connected, _ = await self.ws.connect()
        assert connected
        return self

    async def __aexit__(self, *exc):
        await self.ws.disconnect()

    async def send(self, frame) -> None:
        await self.ws.send_to(text_data=frame if isinstance(frame, str) else json.dumps(frame))

    async def recv(self, timeout=5) -> dict:
        return json.loads(await self.ws.receive_from(timeout=timeout))

    async def hello(self, **kw) -> dict:
        await self.send(hello(**kw))
        return await self.recv()

    async def closed(self, timeout=5) -> int:
        """The close code the server sent (after any frames before it)."""
        while True:
            out = await self.ws.receive_output(timeout=timeout)
            if out["type"] == "websocket.close":
                return out.get("code", 1000)


def add_samples(gpu, start: datetime, values: list[dict], *, step=timedelta(seconds=1), instance=None,
                team=None, slice_=None) -> None:
    """Raw samples of one GPU, one per ``step`` from ``start``, written as the ingest writes."""
    team = team if team is not None else getattr(instance, "team", None)
    rows = []
    for i, m in enumerate(values):
        assert set(m) <= set(RAW_METRICS), set(m) - set(RAW_METRICS)
        rows.append((start + i * step, gpu.pk, getattr(slice_, "pk", None), getattr(instance, "pk", None),
                     getattr(team, "pk", None), None, *(m.get(name) for name in RAW_METRICS)))
    insert_samples(rows)


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def new_boot() -> str:
    return secrets.token_hex(16)
