"""Websockets: host agents publish on /ws/agent/, browsers subscribe on /ws/live/.

Both are adapters: they parse, authorise and call the ingest service or the
tenancy checks; no ORM call runs on the event loop.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import cache

from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import connection

from agent import protocol as p
from audit.models import Outcome
from audit.recording import record_event
from console import jsonlimits
from console.live import (
    FLEET_GROUP,
    encode,
    host_group,
    instance_group,
    session_group,
    team_group,
    user_group,
)
from console.models import Team
from console.policy import PolicyConsumer, may
from console.request_context import bind_scope
from instances.models import Host, Instance

from . import agent_links, diagnostics, fanout, frames, ingest, inventory, services

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 10.0
QUEUE_FRAMES = 8  # per connection; a frame that finds it full closes the agent with 4429
MERGE_FRAMES = 8  # frames of one connection one attribution (and so one write) may take
# Readings waiting that make an attribution or a write start without waiting out its
# gather interval: a burst of hosts, or the large frames of an agent catching up (it
# sends its next frame once the last is acknowledged), go at full speed.
GATHER_RECORDS = 64


def gather_s(*, reads: bool = False) -> float:
    """The least time between two writes (or, ``reads``, two attributions) of frames."""
    name, default = ("INGEST_READ_GATHER_S", 0.02) if reads else ("INGEST_GATHER_S", 0.05)
    return max(0.0, float(getattr(settings, name, default)))


@cache
def _writers() -> ThreadPoolExecutor:
    """Threads for sample writes, apart from the one thread of other ORM calls, so
    one slow write holds up only its own agent. SQLite has one writer anyway."""
    default = 1 if connection.vendor == "sqlite" else 4
    return ThreadPoolExecutor(max_workers=int(getattr(settings, "INGEST_WRITER_THREADS", default)),
                              thread_name_prefix="ingest")


@cache
def _readers() -> ThreadPoolExecutor:
    """The one thread that attributes frames (reads only), so their readings reach the
    live fan-out while earlier frames are being written."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-read")


def close_writer_connections() -> None:
    """Close the database connection each ingest thread holds (tests, shutdown)."""
    from django.db import connections

    for pool in (_writers(), _readers()):
        barrier = threading.Barrier(pool._max_workers)

        def close(barrier=barrier) -> None:
            connections.close_all()
            barrier.wait(timeout=10)  # one task per thread: each waits for the others

        for future in [pool.submit(close) for _ in range(pool._max_workers)]:
            future.result()


CONNECTION_CHECK_S = 5.0
_checked = threading.local()


def _keeping_connection(func):
    """Run ``func`` on a writer thread that keeps its database connection.

    ``database_sync_to_async`` closes obsolete connections before and after every call,
    and with ``CONN_MAX_AGE = 0`` (the SQLite default) that is every connection: one
    connect and close per agent frame. A writer thread instead keeps its connection,
    closes it after a failed call, and leaves persistent connections to Django's rules,
    looked at once every ``CONNECTION_CHECK_S`` per thread (with ``CONN_HEALTH_CHECKS``
    each look costs a round trip, and frames come many times a second).
    """

    @functools.wraps(func)
    def run(*args, **kwargs):
        if connection.connection is not None and connection.settings_dict.get("CONN_MAX_AGE"):
            now = time.monotonic()
            if now >= getattr(_checked, "next", 0.0):
                _checked.next = now + CONNECTION_CHECK_S
                connection.close_if_unusable_or_obsolete()
        try:
            return func(*args, **kwargs)
        except Exception:
            connection.close()  # it may be what failed; the next call opens a new one
            raise

    return run


def _write(func):
    return sync_to_async(_keeping_connection(func), thread_sensitive=False, executor=_writers())


def _read(func):
    return sync_to_async(_keeping_connection(func), thread_sensitive=False, executor=_readers())


class Flusher:
    """This process's sample writes, in two stages.

    1. Attribute (``ingest.prepare``, reads only, on a thread of its own): the frames
       every agent connection has handed over are attributed together (each reading's
       device and holder), and their newest readings go to the live fan-out at once,
       without waiting for writes of earlier frames. An attribution starts at once
       after a quiet spell, and otherwise no sooner than ``INGEST_READ_GATHER_MS``
       after the one before (short: the live fan-out waits for it).
    2. Write (``ingest.write``, on the writer threads): the attributed frames of every
       connection that has no write under way are stored in one transaction; the acks
       follow the commit. A write starts at once after a quiet spell or when
       ``GATHER_RECORDS`` readings wait, and otherwise no sooner than ``INGEST_GATHER_MS``
       after the one before, so that frames arriving one by one (agents sample each on
       their own schedule) are stored several to a transaction rather than each in its
       own.

    A connection's frames are attributed, written and acknowledged in the order
    received. Once a write of a connection fails, its later frames are not written
    (they fail too: the agent sends them all again on its next connection, and storing
    a later frame first would make the failed one look like a duplicate).
    """

    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self.waiting: list[tuple[ingest.Link, frames.Samples, asyncio.Future]] = []  # to attribute
        self.attributing = False
        self.ready: list[tuple[ingest.Prepared, list[asyncio.Future]]] = []  # attributed, to write
        self.busy: set[int] = set()  # id() of the links a write holds
        self.failed: weakref.WeakSet = weakref.WeakSet()  # links whose write failed
        self.running = 0
        self.started = {"reads": float("-inf"), "writes": float("-inf")}  # loop time of each stage's last start
        self.timers: dict[str, asyncio.TimerHandle] = {}  # a stage waiting for more frames

    def submit(self, link: ingest.Link, batch: frames.Samples) -> asyncio.Future:
        """A future of (boot_id, high) acks for ``batch``, or the write's exception."""
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((link, batch, future))
        fanout.writing()
        self._attribute_next()
        return future

    def _attribute_next(self) -> None:
        if self.attributing or not self.waiting:
            return
        if self._gathering("reads", (batch for _, batch, _ in self.waiting), self._attribute_next):
            return
        self.started["reads"] = asyncio.get_running_loop().time()
        taken, left, per_link = [], [], {}
        for item in self.waiting:
            key = id(item[0])
            if per_link.get(key, 0) >= MERGE_FRAMES:
                left.append(item)
                continue
            per_link[key] = per_link.get(key, 0) + 1
            taken.append(item)
        self.waiting = left
        self.attributing = True
        asyncio.ensure_future(self._attribute(taken))

    async def _attribute(self, taken: list) -> None:
        groups: dict[int, tuple[ingest.Link, list]] = {}
        for link, batch, future in taken:
            groups.setdefault(id(link), (link, []))[1].append((batch, future))
        latest = {}
        try:
            prepared = await _read(ingest.prepare)(
                [(link, [batch for batch, _ in items]) for link, items in groups.values()])
        except Exception as exc:  # noqa: BLE001 (every connection of the batch hears of it)
            for _, _, future in taken:
                if not future.done():
                    future.set_exception(exc)
        else:
            for prep, (_, items) in zip(prepared, groups.values(), strict=True):
                latest.update(prep.latest)
                self.ready.append((prep, [future for _, future in items]))
        finally:
            self.attributing = False
            self._published(len(taken), latest)
        self._write_next()
        self._attribute_next()

    def _write_next(self) -> None:
        while self.running < self.concurrency and self.ready:
            if self._gathering("writes", (b for prep, _ in self.ready for b in prep.batches), self._write_next):
                return
            taken, left, held = [], [], set(self.busy)
            for item in self.ready:
                link = item[0].link
                if link in self.failed:
                    self._fail(item[1], RuntimeError("an earlier write of this connection failed"))
                elif id(link) in held:
                    left.append(item)  # one write per connection at a time, in order
                else:
                    held.add(id(link))
                    taken.append(item)
            self.ready = left
            if not taken:
                return
            self.busy.update(id(prep.link) for prep, _ in taken)
            self.running += 1
            self.started["writes"] = asyncio.get_running_loop().time()
            asyncio.ensure_future(self._write(taken))

    def _gathering(self, stage: str, batches, then) -> bool:
        """Whether ``stage`` ("reads" or "writes") waits for more frames; ``then`` is
        called when the wait is over."""
        loop = asyncio.get_running_loop()
        wait = self.started[stage] + gather_s(reads=stage == "reads") - loop.time()
        if wait > 0 and not _at_least(GATHER_RECORDS, batches):
            if stage not in self.timers:  # frames trickle in: let more of them join
                self.timers[stage] = loop.call_later(wait, self._gathered, stage, then)
            return True
        return False

    def _gathered(self, stage: str, then) -> None:
        del self.timers[stage]
        then()

    async def _write(self, taken: list) -> None:
        try:
            results = await _write(ingest.write)([prep for prep, _ in taken])
        except Exception as exc:  # noqa: BLE001 (every connection of the write hears of it)
            results = [exc] * len(taken)
        finally:
            self.busy.difference_update(id(prep.link) for prep, _ in taken)
            self.running -= 1
        for (prep, futures), result in zip(taken, results, strict=True):
            if isinstance(result, Exception):
                self.failed.add(prep.link)
                self._fail(futures, result)
                continue
            for future, ack in zip(futures, result.acks, strict=True):
                if not future.done():
                    future.set_result(ack)
        self._write_next()

    @staticmethod
    def _fail(futures: list[asyncio.Future], exc: Exception) -> None:
        for future in futures:
            if not future.done():
                future.set_exception(exc)

    @staticmethod
    def _published(frames_count: int, latest: dict) -> None:
        fanout.offer(latest)
        for _ in range(frames_count):
            fanout.written({})


_flushers: dict = {}


def flusher() -> Flusher:
    """This event loop's flusher (one per server process)."""
    loop = asyncio.get_running_loop()
    found = _flushers.get(loop)
    if found is None:
        _flushers.clear()  # a new loop (tests): the old one's flusher is gone with it
        found = _flushers[loop] = Flusher(_writers()._max_workers)
    return found


def _bearer(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            parts = value.decode("latin-1").split()
            if len(parts) == 2 and parts[0].lower() == "bearer":
                return parts[1]
            return None
    return None


def _peer(scope) -> str:
    client = scope.get("client") or ("", 0)
    return str(client[0] or "")


# A hello's work and its welcome's way back take this long at most, under load.
WELCOME_MARGIN_S = 1.0


def _at_least(records: int, batches) -> bool:
    """Whether the batches hold that many readings (counting stops there)."""
    for batch in batches:
        records -= len(batch.records)
        if records <= 0:
            return True
    return False


def _accept_hello(host: Host, hello: frames.Hello, peer: str, since: float) -> inventory.HelloResult | None:
    """The hello's inventory check and the connection's record, in one turn of the
    database thread; None, with nothing done, when that turn comes too late for the
    welcome to reach the agent (waiting since ``since``, its connection) in time."""
    if time.monotonic() - since > p.WELCOME_TIMEOUT_S - WELCOME_MARGIN_S:
        return None
    result = inventory.accept_hello(host=host, hello=hello, conflict_code=p.CLOSE_GPU_CONFLICT)
    ingest.connected(host=host, hello=hello, result=result, peer=peer)
    return result


class AgentConsumer(AsyncWebsocketConsumer):
    """Protocol v1 (docs/agent-protocol.md): hello → welcome, then samples → ack."""

    async def dispatch(self, message):
        # Channels hops to the ORM thread before every message to close stale
        # connections: a thread switch per frame. Every database call here goes
        # through database_sync_to_async, which does that in its own thread.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        with bind_scope(self.scope):  # audit events carry the agent's address
            await handler(message)

    async def connect(self):
        self.host = None
        self.hello = None
        self.closing = False
        self.unacked: collections.deque[asyncio.Future] = collections.deque()  # frames not yet stored, in order
        self.ready = asyncio.Event()  # set while frames wait to be acked
        self.acker: asyncio.Task | None = None
        await self.accept()
        # The agent sends its hello as soon as it is connected, and waits for the
        # welcome from then on (p.WELCOME_TIMEOUT_S); the hello waits meanwhile for this
        # connection's token check at the database.
        self.opened = time.monotonic()
        if b"token" in self.scope.get("query_string", b"").lower():
            await self.refuse(p.CLOSE_BAD_TOKEN, "bad_token", "never send the token in the URL; use the Authorization header")
            return
        raw = _bearer(self.scope)
        if raw is None:
            await self.refuse(p.CLOSE_BAD_TOKEN, "bad_token", "send the host token as 'Authorization: Bearer <token>'")
            return
        token = await database_sync_to_async(services.authenticate_agent)(raw)
        if token is None:
            await self.refuse(p.CLOSE_BAD_TOKEN, "bad_token", "the host token is not valid or was revoked")
            return
        self.host = token.host
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(HELLO_TIMEOUT_S, self._hello_late)
        # A token that expires (a rotated one, after its grace period) ends its connection;
        # 4440 makes the agent reconnect, reading its token file again.
        self._expire_at(token.expires_at.timestamp())
        # services.revoke_host_token / rotate_host_token reach this connection here.
        self.token_group = services.token_group(token.pk)
        await self.channel_layer.group_add(self.token_group, self.channel_name)
        await self.channel_layer.group_add(diagnostics.agent_group(self.host.pk), self.channel_name)

    def _expire_at(self, when: float) -> None:
        if getattr(self, "expiry", None) is not None:
            self.expiry.cancel()
        self.expiry = asyncio.get_running_loop().call_later(max(0.0, when - time.time()), self._token_expired)

    def _token_expired(self):
        if not self.closing:
            asyncio.ensure_future(
                self.refuse(p.CLOSE_TOKEN_EXPIRED, "token_expired", "the host token expired; connect with its replacement")
            )

    async def agent_token(self, message):
        if message["revoked"]:
            await self.refuse(p.CLOSE_BAD_TOKEN, "bad_token", "the host token was revoked")
        else:  # rotated: the old token now ends with its grace period
            self._expire_at(message["expires_at"])

    def _hello_late(self):
        if self.hello is None and not self.closing:
            asyncio.ensure_future(
                self.refuse(p.CLOSE_HELLO_TIMEOUT, "hello_timeout", f"no hello within {HELLO_TIMEOUT_S:.0f} s")
            )

    async def disconnect(self, code):
        if code == p.CLOSE_TOO_LARGE and not self.closing and self.host is not None:
            # Refused by the server before the consumer saw it (gpuconsole/serving.py).
            await database_sync_to_async(_note_refusal)(
                self.host, "frame_too_large", f"a frame over {p.MAX_FRAME_BYTES} bytes", True)
        self.closing = True
        for handle in (getattr(self, "timer", None), getattr(self, "expiry", None)):
            if handle is not None:
                handle.cancel()
        if getattr(self, "token_group", None) is not None:
            await self.channel_layer.group_discard(self.token_group, self.channel_name)
            await self.channel_layer.group_discard(diagnostics.agent_group(self.host.pk), self.channel_name)
        await agent_links.left(self)
        if self.acker is not None:
            self.acker.cancel()
            # The frames handed over are written, acked or not, before the link's last state.
            await asyncio.gather(self.acker, *self.unacked, return_exceptions=True)
        if self.host is not None and self.hello is not None:
            try:
                await _write(ingest.flush)(self.link)
                await database_sync_to_async(ingest.disconnected)(host_id=self.host.pk)
            except Exception:  # the database may be what ended the connection
                log.warning("could not record the disconnect of %s", self.host.name, exc_info=True)

    async def receive(self, text_data=None, bytes_data=None):
        if self.closing or self.host is None:
            return
        link = agent_links.reader_of(text_data) if self.hello is not None else None
        if link is not None:
            await link.read(self, text_data)
            return
        try:
            frame = frames.read(text_data if text_data is not None else bytes_data,
                                hello_expected=self.hello is None, now=time.time())
            if self.hello is None:
                # Here in time: however long its turn at the database takes (a fleet's
                # agents reconnecting at once after a restart), it is not "late".
                self.timer.cancel()
                await self.on_hello(frame, since=self.opened)
            else:
                batch = frame
                if len(self.unacked) >= QUEUE_FRAMES:
                    # Agents send one frame and wait for its ack; this one did not.
                    # (gpuconsole/serving.py stops reading the socket meanwhile.)
                    raise inventory.Refused(p.CLOSE_FLOOD, "too_many_unacked",
                                            f"more than {QUEUE_FRAMES} frames wait to be stored; "
                                            "send the next frame after the ack of the last")
                self.unacked.append(flusher().submit(self.link, batch))
                self.ready.set()
        except frames.FrameError as exc:
            await self.refuse(exc.close_code, exc.code, exc.message, bad_frame=True, extra=exc.frame())
        except inventory.Refused as exc:
            await self.refuse(exc.close_code, exc.code, exc.message)
        except Exception:
            log.exception("agent connection of %s failed", self.host.name)
            await self.refuse(p.CLOSE_SERVER_ERROR, "server_error", "the server failed; try again later")

    async def on_hello(self, hello: frames.Hello, since: float):
        if hello.host != self.host.name:
            raise inventory.Refused(p.CLOSE_BAD_TOKEN, "bad_token", f"this token does not belong to host {hello.host}")
        result = await database_sync_to_async(_accept_hello)(self.host, hello, _peer(self.scope), since)
        if result is None:
            # The agent stopped waiting for its welcome and will connect again: its
            # hello's work is not done for nothing, so the queue behind it drains sooner.
            log.info("hello of %s skipped: its turn came after the agent's %.0f s wait", self.host.name,
                     p.WELCOME_TIMEOUT_S)
            self.closing = True
            await self.close(code=1013, reason="hello_skipped")  # try again later
            return
        self.hello = hello  # connected: the disconnect is recorded whatever happens next
        self.link = ingest.Link(self.host.pk, self.host.name)
        if self.closing:  # closed while the hello waited (its token revoked or expired)
            return
        self.acker = asyncio.ensure_future(self.ack_loop())
        await self.send_frame(p.Welcome(v=p.VERSION, host=self.host.name, server_time=time.time(),
                                        registered=result.registered, vanished=result.vanished))
        await agent_links.joined(self)  # e.g. the host's network rules, now and on every change

    async def ack_loop(self):
        """Acks in the order the frames came, each once its frame is stored."""
        while True:
            await self.ready.wait()
            try:
                boot_id, seq = await asyncio.shield(self.unacked[0])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("storing samples of %s failed", self.host.name)
                await self.send_frame(p.Error(code="server_error",
                                              message="the server could not store this batch; send it again"))
                self.closing = True
                await self.close(code=p.CLOSE_SERVER_ERROR)
                return
            self.unacked.popleft()
            if not self.unacked:
                self.ready.clear()
            await self.send_frame(p.Ack(boot_id=boot_id, seq=seq))

    async def network_ruleset(self, message):
        await self.send(text_data=message["frame"])

    async def diagnostics_request(self, message):
        await self.send(text_data=message["frame"])

    async def send_frame(self, frame: p.Welcome | p.Ack | p.Error):
        await self.send(text_data=p.encode(frame))

    async def refuse(self, close_code: int, code: str, message: str, *, bad_frame: bool = False,
                     extra: p.Error | None = None):
        if self.closing:
            return
        self.closing = True
        await self.send_frame(extra or p.Error(code=code, message=message))
        try:
            await database_sync_to_async(_note_refusal)(self.host, code, message, bad_frame)
        except Exception:
            log.warning("could not record a refused agent frame (%s)", code, exc_info=True)
        await self.close(code=close_code, reason=code)


def _note_refusal(host, code: str, message: str, bad_frame: bool) -> None:
    if bad_frame and host is not None:
        ingest.count_bad_frame(host_id=host.pk, message=message)
    services.record_agent_reject(host=host, reason=message, details={"code": code})


# --- browsers -------------------------------------------------------------------------


CLOSE_UNAUTHENTICATED = 4401
CLOSE_DENIED = 4403
CLOSE_BAD_MESSAGE = 4400
MAX_SUBSCRIPTIONS = 64
KINDS = p.LIVE_KINDS


def _allowed(user, kind: str, ident: int | None) -> bool:
    if kind == "fleet" or kind == "host":
        return may(user, "fleet.view")
    if kind == "team":
        return may(user, "team.read", ident)
    # an instance: whoever sees it (tenancy) may watch it
    return Instance.objects.for_user(user).filter(pk=ident).exists()


def _missing(kind: str, ident: int | None) -> bool:
    """Whether an allowed subscription names a host or team that does not exist. Asked
    only once ``_allowed`` said yes, so it tells nothing to anyone who may not know: a
    team's members are denied any other team, existing or not, and an instance someone
    may not see is denied whether it exists or not."""
    if kind == "host":
        return not Host.objects.filter(pk=ident).exists()
    if kind == "team":
        return not Team.objects.filter(pk=ident).exists()
    return False


DENIED, MISSING = "denied", "missing"


def _refusal(user, kind: str, ident: int | None) -> str | None:
    """Why a subscription is refused (DENIED, recorded in the audit log; MISSING), or
    None: the whole question in one hop to the database thread."""
    if not _allowed(user, kind, ident):
        record_event(actor=user, action="live.denied", outcome=Outcome.DENIED, details={"kind": kind, "id": ident})
        return DENIED
    return MISSING if _missing(kind, ident) else None


def _group(kind: str, ident: int | None) -> str:
    return {"team": team_group, "instance": instance_group, "host": host_group}[kind](ident) if ident is not None else FLEET_GROUP


def _target(target) -> tuple[str, int | None] | str:
    """(kind, id) of a subscription, or what is wrong with it."""
    if not isinstance(target, dict) or target.get("kind") not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}"
    kind, ident = target["kind"], target.get("id")
    if kind == "fleet":
        return kind, None
    if isinstance(ident, bool) or not isinstance(ident, int) or not 1 <= ident <= 2**63 - 1:
        return f"id must be the {kind}'s numeric id"
    return kind, ident


class LiveConsumer(PolicyConsumer, AsyncWebsocketConsumer):
    """Browsers: ``{"subscribe": {"kind": …, "id": …}}``; see docs/live-protocol.md."""

    async def dispatch(self, message):
        with bind_scope(self.scope):  # audit events carry the browser's address
            await super().dispatch(message)

    async def connect(self):
        self.closing = False
        self.joined: set[str] = set()
        self.own_groups: list[str] = []
        self.gpus = fanout.SocketMerge(fanout.interval_s(), lambda text: self.send(text_data=text))
        user = self.scope.get("user")
        if not await self.may("signed_in"):
            await self.accept()  # so that the close carries its code
            await self.close_once(CLOSE_UNAUTHENTICATED)
            return
        # console.live.end_user_sockets reaches this socket through its user's group:
        # joined before the socket is accepted, so that a sign-out, password change or
        # removal right after the browser sees it open still closes it.
        self.own_groups = [user_group(user.pk)]
        session = self.scope.get("session")
        if session is not None and session.session_key:
            self.own_groups.append(session_group(session.session_key))
        for group in self.own_groups:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        self.gpus.close()
        for group in [*self.joined, *self.own_groups]:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.joined.clear()

    async def receive(self, text_data=None, bytes_data=None):
        if self.closing:  # messages queued behind the one that closed the socket
            return
        try:
            message = jsonlimits.loads(text_data or "", max_bytes=jsonlimits.MAX_LIVE_MESSAGE_BYTES)
        except jsonlimits.JsonRefused as exc:
            await self.fail(exc.message if exc.code != "bad_json" else "messages are JSON objects")
            return
        if not isinstance(message, dict) or len(message) != 1 or next(iter(message)) not in ("subscribe", "unsubscribe"):
            await self.fail('send {"subscribe": {"kind": …, "id": …}} or {"unsubscribe": {…}}')
            return
        verb, target = next(iter(message.items()))
        parsed = _target(target)
        if isinstance(parsed, str):
            await self.fail(parsed)
            return
        kind, ident = parsed
        group = _group(kind, ident)
        if verb == "unsubscribe":
            if group in self.joined:
                self.joined.discard(group)
                await self.channel_layer.group_discard(group, self.channel_name)
            await self.send_event("unsubscribed", p.Subscription(kind, ident))
            return
        user = self.scope["user"]
        refusal = await database_sync_to_async(_refusal)(user, kind, ident)
        if refusal == DENIED:
            await self.close_once(CLOSE_DENIED)
            return
        if refusal == MISSING:
            # Said, not closed: a page's subscriptions share one socket, and one of them
            # naming a host or team deleted since must not stop the others.
            await self.send_event("error", p.LiveError(f"there is no {kind} {ident}"))
            return
        if group not in self.joined:
            if len(self.joined) >= MAX_SUBSCRIPTIONS:
                await self.fail(f"at most {MAX_SUBSCRIPTIONS} subscriptions per connection")
                return
            self.joined.add(group)
            await self.channel_layer.group_add(group, self.channel_name)
        await self.send_event("subscribed", p.Subscription(kind, ident))

    async def fail(self, message: str):
        await self.send_event("error", p.LiveError(message))
        await self.close_once(CLOSE_BAD_MESSAGE)

    async def close_once(self, code: int) -> None:
        """Close, and send nothing more: neither an answer to a message already queued nor
        readings or events heard before the socket is gone."""
        if self.closing:
            return
        self.closing = True
        self.gpus.close()
        await self.close(code=code)

    async def send_event(self, event: str, data: p.Subscription | p.LiveError):
        await self.send(text_data=encode(event, data))

    async def live_end(self, message):
        # The user logged out or lost a role: what this socket was allowed may be gone.
        await self.close_once(CLOSE_UNAUTHENTICATED)

    async def live_gpus(self, message):
        # From every server process's coalescer and every group this socket joined:
        # merged here so the browser gets each reading once, a few messages a second.
        if not self.closing:
            self.gpus.add(fanout.readings_of(message))

    async def live_event(self, message):
        # Serialised once by the publisher (console.live.message); forwarded as is.
        text = message.get("text")
        if text is None:  # {"event", "data"} from a worker of an older release: data is a dict
            text = p.encode({"event": message["event"], "data": message["data"]})
        if not self.closing:
            await self.send(text_data=text)
