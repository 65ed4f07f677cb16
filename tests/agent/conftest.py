"""A tiny in-process agent server speaking protocol v1, and small helpers."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from monitoring.agent.backends.replay import ReplaySource, Trace
from monitoring.agent.spool import Spool
from monitoring.agent.uplink import Backoff, HostLink

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "telemetry" / "h200_mixed.jsonl"
TOKEN = "host-token-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeServer:
    """Stores records by (boot_id, seq), acks each frame, and can misbehave on request."""

    def __init__(self, port: int | None = None, tokens=(TOKEN,)):
        self.port = port or free_port()
        self.tokens = set(tokens)
        self.stored: dict[tuple[str, int], dict] = {}
        self.received: list[tuple[str, int]] = []
        self.hellos: list[dict] = []
        self.reject = None  # frame -> (close code, error code) or None
        self.go_away_after = None  # close with 1001 once this many records are stored
        self.gone_away = asyncio.Event()
        self._server = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/agent/"

    async def start(self) -> FakeServer:
        self._server = await serve(self._handle, "127.0.0.1", self.port)
        return self

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.stop()

    async def _handle(self, ws):
        auth = ws.request.headers.get("Authorization", "")
        hello = json.loads(await ws.recv())
        if auth.removeprefix("Bearer ") not in self.tokens:
            await self._error(ws, 4401, "bad_token", "the token is not valid")
            return
        self.hellos.append(hello)
        await ws.send(json.dumps({"type": "welcome", "v": 1, "host": hello["host"],
                                  "server_time": time.time()}))  # fmt: skip
        try:
            async for text in ws:
                await self._samples(ws, json.loads(text))
        except ConnectionClosed:
            pass

    async def _samples(self, ws, frame: dict) -> None:
        verdict = self.reject(frame) if self.reject else None
        if verdict:
            await self._error(ws, verdict[0], verdict[1], "rejected by the test")
            return
        for record in frame["records"]:
            key = (frame["boot_id"], record["seq"])
            self.received.append(key)
            self.stored.setdefault(key, record)
        await ws.send(json.dumps({"type": "ack", "boot_id": frame["boot_id"],
                                  "seq": frame["records"][-1]["seq"]}))  # fmt: skip
        if self.go_away_after is not None and len(self.stored) >= self.go_away_after:
            self.go_away_after = None
            self.gone_away.set()
            await ws.close(1001, "going away")

    async def _error(self, ws, close_code: int, code: str, message: str) -> None:
        await ws.send(json.dumps({"type": "error", "code": code, "message": message}))
        await ws.close(close_code, code)


@pytest.fixture
def trace() -> Trace:
    if not TRACE.exists():
        pytest.skip(f"recorded trace not found at {TRACE}")
    return Trace.load(TRACE)


@pytest.fixture
def small_trace(tmp_path) -> Path:
    """A 20-sample trace, 0.2 s apart, with slow metrics on every 5th sample."""
    path = tmp_path / "small.jsonl"
    static = {"name": "NVIDIA H200", "uuid": "GPU-00000000-1111-2222-3333-444444444444",
              "memory_total": 150754820096, "power_limit_mw": 700000,
              "pci_bus_id": "00000000:00:06.0", "mig_mode": 0}  # fmt: skip
    lines = [json.dumps({"static": static, "plan": ["idle:4"], "period_s": 0.2})]
    for i in range(20):
        row = {"t": 1000.0 + 0.2 * i, "phase": "idle", "gpu_util": i, "mem_used": 10**9 + i,
               "power_mw": 70000 + i, "processes": [{"pid": 7, "used_memory": 5 * 10**8}]}  # fmt: skip
        if i % 5 == 0:
            row["energy_mj"] = 10**6 + i * 1000
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
async def server():
    async with FakeServer() as running:
        yield running


@pytest.fixture
def server_class():
    return FakeServer


@pytest.fixture
def make_link():
    def make(server_url: str, spool: Spool, source, token: str = TOKEN, **kw) -> HostLink:
        info = source.hosts()[0]
        return HostLink(
            server=server_url,
            host=info.host,
            token=token,
            gpus=info.gpus,
            backend=source.name,
            spool=spool,
            backoff=Backoff(base_s=0.05, cap_s=0.2),
            **kw,
        )

    return make


@pytest.fixture
def replay():
    def make(path, speed: float = 50.0, host: str = "test-host") -> ReplaySource:
        return ReplaySource(Trace.load(path), host=host, speed=speed, once=True)

    return make
