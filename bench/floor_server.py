"""The floor for the live benchmarks: an ASGI application that does only what every GPU
reading must have done on its way from an agent to a browser, run under the same ASGI
server and load as the console (``bench/live_latency.py --servers floor-daphne,…``).

Per agent frame: the frame is read and checked by the console's own reader
(``monitoring.frames.read``, the wire schema), its readings are sent at once to every
browser socket as one ``gpus`` message (``LiveReading`` encoded as the console encodes
it, no coalescing), and, when ``DATABASE_URL`` names PostgreSQL, stored by the console's
own COPY text (``monitoring.ingest.copy_text``) in a copy of the sample table, one
transaction for whatever frames wait, on one writer thread; the ack follows the commit.

What it leaves out is what the console adds: tokens, sessions and origins, holders and
their changes, high marks (exactly-once storage), the latest state and counters, alert
rules, GPU events, the channel layer and Channels' consumers, coalescing and per-group
fan-out. Its server CPU per reading and its latency are what this machine and server
give for the bare path; the console's figures sit beside them in one run.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import django

django.setup()

from agent import protocol as p  # noqa: E402
from monitoring import frames, ingest, readings  # noqa: E402

FLOOR_TABLE = "bench_floor_sample"
NO_DEVICE = ingest.Device(gpu_uuid="", gpu_id=0, slice_id=None, index=None)  # no inventory read


class Store:
    """One PostgreSQL connection on one thread: COPY the records of every waiting frame,
    commit, then resolve each frame's future."""

    def __init__(self, url: str):
        import psycopg

        self.conn = psycopg.connect(url)
        with self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
            # The sample table's columns and indexes, without its day partitions.
            cur.execute(f"CREATE TABLE {FLOOR_TABLE} (LIKE {ingest.SAMPLE_TABLE} INCLUDING DEFAULTS INCLUDING INDEXES)")
            cur.execute("SELECT uuid, id FROM instances_gpu")
            self.gpu_ids = dict(cur.fetchall())
        self.conn.commit()
        self.columns = ", ".join(ingest.READING_COLUMNS)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="floor-store")
        self.waiting: list[tuple[list, asyncio.Future]] = []
        self.running = False
        self.ids: dict[str, _Ids] = {}

    def held(self, uuid: str) -> _Ids:
        found = self.ids.get(uuid)
        if found is None:
            found = self.ids[uuid] = _Ids(f"{self.gpu_ids.get(uuid, 0)}\t\\N\t\\N\t\\N")
        return found

    def submit(self, records: list) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(([(r, self.held(r.gpu)) for r in records if not r.event], future))
        if not self.running:
            asyncio.ensure_future(self._drain())
        return future

    async def _drain(self) -> None:
        self.running = True
        try:
            while self.waiting:
                taken, self.waiting = self.waiting, []
                found = [pair for rows, _ in taken for pair in rows]
                try:
                    await asyncio.get_running_loop().run_in_executor(self.pool, self._write, found)
                except Exception as exc:  # noqa: BLE001 (each frame's sender hears of it)
                    for _, future in taken:
                        future.set_exception(exc)
                else:
                    for _, future in taken:
                        future.set_result(None)
        finally:
            self.running = False

    def _write(self, found: list) -> None:
        if found:
            text, _ = ingest.copy_text(found)
            with self.conn.cursor() as cur, cur.copy(f"COPY {FLOOR_TABLE} ({self.columns}) FROM STDIN") as copy:
                copy.write(text)
        self.conn.commit()


class _Ids:
    __slots__ = ("ids",)

    def __init__(self, ids: str):
        self.ids = ids


_store: Store | None = None
_store_lock = threading.Lock()
_browsers: set = set()


def store() -> Store | None:
    global _store
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return None
    with _store_lock:
        if _store is None:
            _store = Store(url)
    return _store


async def app(scope, receive, send):
    kind = scope["type"]
    if kind == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    elif kind == "http":
        await send({"type": "http.response.start", "status": 200 if scope["path"] == "/healthz" else 404,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
    elif scope["path"].startswith("/ws/agent/"):
        await agent(receive, send)
    else:
        await browser(receive, send)


async def agent(receive, send) -> None:
    saved = store()
    hello = None
    acks: asyncio.Queue = asyncio.Queue()
    acker = asyncio.ensure_future(_ack_in_order(acks, send))
    try:
        while True:
            message = await receive()
            if message["type"] == "websocket.connect":
                await send({"type": "websocket.accept"})
                continue
            if message["type"] == "websocket.disconnect":
                return
            try:
                frame = frames.read(message.get("text"), hello_expected=hello is None, now=time.time())
            except frames.FrameError as exc:  # the console's own refusal: its error, then its close code
                await send({"type": "websocket.send", "text": p.encode(p.Error(code=exc.code, message=exc.message))})
                await send({"type": "websocket.close", "code": exc.close_code})
                return
            if hello is None:
                hello = frame
                await send({"type": "websocket.send", "text": p.encode(
                    p.Welcome(v=p.VERSION, host=hello.host, server_time=time.time()))})
                continue
            _relay(hello.host, frame)
            done = saved.submit(frame.records) if saved is not None else None
            await acks.put((done, frame.boot_id, frame.last_seq))
    finally:
        acker.cancel()


async def _ack_in_order(acks: asyncio.Queue, send) -> None:
    while True:
        done, boot_id, seq = await acks.get()
        if done is not None:
            await done
        await send({"type": "websocket.send", "text": p.encode(p.Ack(boot_id=boot_id, seq=seq))})


def _relay(host: str, frame) -> None:
    """The frame's readings to every browser, each made as the console makes it and encoded once."""
    parts = []
    for r in frame.records:
        if r.event:
            continue
        live = readings.live(uuid=r.slice or r.gpu, host_id=0, host=host, device=NO_DEVICE, t=r.t, m=r.m,
                             instance=None, team=None)
        parts.append(p.encode(live.reading))
    if not parts:
        return
    text = p.GPUS_HEAD + ",".join(parts) + p.GPUS_TAIL
    for queue in _browsers:
        queue.put_nowait(text)


async def browser(receive, send) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def sender():
        while True:
            await send({"type": "websocket.send", "text": await queue.get()})

    task = None
    try:
        while True:
            message = await receive()
            if message["type"] == "websocket.connect":
                await send({"type": "websocket.accept"})
                _browsers.add(queue)
                task = asyncio.ensure_future(sender())
            elif message["type"] == "websocket.disconnect":
                return
    finally:
        _browsers.discard(queue)
        if task is not None:
            task.cancel()
