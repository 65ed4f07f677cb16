"""One host's way to the server: outbox -> memory or spool -> websocket, with acks and retries.

Sampling threads hand records to the :class:`Outbox` (numbered, encoded). The event
loop takes them into memory and the sender sends them at once, one frame at a time,
forgetting them only when the server acknowledges them. Records the server has not
acknowledged within ``SPOOL_AFTER_S`` (slow, or no connection) go to the on-disk spool
(off the event loop), and so does everything held when the agent stops. The spool holds the oldest records, memory the newer ones, so the
sender empties the spool first and order is kept. On a healthy link a record never
touches the disk: that is most of what the agent costs as a process.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

import msgspec
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from . import diagnostics, firewall, protocol
from .outbox import Outbox
from .spool import Batch, Spool, SpoolError

log = logging.getLogger("gpuconsole.agent")

ACK_TIMEOUT_S = 30.0
CLOCK_SKEW_WARNING_S = 2.0
# While connected, records the server has not acknowledged this long are spooled too.
SPOOL_AFTER_S = 5.0
SPOOL_RETRY_S = 1.0


class FatalError(Exception):
    """The server refused this agent in a way that retrying cannot fix."""


def new_boot_id() -> str:
    return secrets.token_hex(16)


@dataclass
class Backoff:
    """Exponential backoff with full jitter."""

    base_s: float = 0.5
    cap_s: float = 30.0
    attempt: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap_s, self.base_s * 2**self.attempt)
        self.attempt = min(self.attempt + 1, 30)
        return random.uniform(0, ceiling)

    def reset(self) -> None:
        self.attempt = 0


def describe_failure(exc: BaseException) -> str:
    """A short human phrase for why a connection attempt failed."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "host name not found"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, InvalidStatus):
        return f"the server answered HTTP {exc.response.status_code}"
    if isinstance(exc, InvalidHandshake):
        return f"websocket handshake failed ({exc})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__


class _Reconnect(Exception):
    """Leave this connection and open a new one (after backoff unless immediate)."""

    def __init__(self, message: str, *, immediate: bool = False):
        super().__init__(message)
        self.immediate = immediate


class HostLink:
    network = None  # a firewall.Enforcer where this agent applies the host's network rules (--network)

    def __init__(
        self,
        *,
        server: str,
        host: str,
        token: str,
        gpus: list[dict],
        backend: str,
        spool: Spool,
        boot_id: str | None = None,
        retry_auth: bool = False,
        label: str = "",
        backoff: Backoff | None = None,
        driver: str | None = None,
        token_file: str | None = None,
    ):
        self.server = server
        self.host = host
        self.token = token
        # Read again before each connection, so a rotated token is picked up without a restart.
        self.token_file = token_file
        self.gpus = gpus
        self.backend = backend
        self.driver = driver
        self.spool = spool
        self.boot_id = boot_id or new_boot_id()
        self.retry_auth = retry_auth
        self.label = label
        self.backoff = backoff or Backoff()
        self.outbox = Outbox(self.boot_id)
        diagnostics.LOG_TAIL.install()
        self._last_error: protocol.Error | None = None
        self._rehello: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None  # the outbox has records (or a spool check is due)
        self._ready: asyncio.Event | None = None  # something for the sender to look at
        self._skew_warned = False
        self._writing: asyncio.Future | None = None
        # Taken from the outbox, neither acknowledged nor spooled: (seq, body, monotonic time).
        self._held: deque[tuple[int, str, float]] = deque()
        self._closed_seen = False
        self._spool_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- plumbing ---------------------------------------------------------------

    def _say(self, text: str) -> str:
        return f"{self.label}: {text}" if self.label else text

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._wake = asyncio.Event()
        self._ready = asyncio.Event()
        self._rehello = asyncio.Event()
        wake = self._wake
        loop_thread = threading.get_ident()

        def notify() -> None:
            if threading.get_ident() == loop_thread:
                wake.set()  # a source sampling on the loop itself: no self-pipe, no extra wakeup
            else:
                loop.call_soon_threadsafe(wake.set)

        self.outbox.notify = notify

    def update_gpus(self, gpus: list[dict]) -> None:
        """The host's GPUs changed: reconnect and say hello again (same boot_id)."""
        self.gpus = gpus
        self._rehello.set()
        self._ready.set()

    @property
    def in_memory(self) -> int:
        """Records neither acknowledged nor spooled: in the outbox or held by the loop."""
        return len(self.outbox) + len(self._held)

    @property
    def drained(self) -> bool:
        """Everything sampled so far is acknowledged (nothing held, being spooled, or spooled)."""
        return (len(self.outbox) == 0 and not self._held and self._writing is None
                and len(self.spool) == 0)  # fmt: skip

    def flush_now(self) -> None:
        """Move whatever memory and the outbox hold into the spool (used at shutdown)."""
        rows = [(seq, body) for seq, body, _ in self._held] + self.outbox.take()
        self._held.clear()
        self.spool.append(self.boot_id, rows)

    async def run(self) -> None:
        if self._wake is None:
            self.bind(asyncio.get_running_loop())
        flusher = asyncio.create_task(self._flush_loop())
        try:
            await self._connect_loop()
        finally:
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            if self._writing is not None:
                # A write already handed to a thread finishes before anything newer is spooled.
                await asyncio.gather(self._writing, return_exceptions=True)

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            rows = self.outbox.take()
            if rows:
                now = time.monotonic()
                self._held.extend([(seq, body, now) for seq, body in rows])
                self._ready.set()
            await self._spool_held()

    async def _spool_held(self) -> None:
        """Write the held records unacknowledged for SPOOL_AFTER_S to the spool (connected
        or not: a short reconnect costs no disk write); a check is timed for the rest."""
        held = self._held
        if not held:
            return
        limit = time.monotonic() - SPOOL_AFTER_S
        count = 0
        for _, _, taken in held:
            if taken > limit:
                break
            count += 1
        if count < len(held):
            self._arm_spool_timer(held[count][2] + SPOOL_AFTER_S - time.monotonic())
        if count == 0:
            return
        rows = [held.popleft() for _ in range(count)]
        self._writing = asyncio.ensure_future(
            asyncio.to_thread(self.spool.append, self.boot_id, [(seq, body) for seq, body, _ in rows])
        )
        try:
            await asyncio.shield(self._writing)
        except (OSError, SpoolError) as exc:
            held.extendleft(reversed(rows))
            dropped = 0
            while len(held) > self.spool.max_records:
                held.popleft()
                dropped += 1
            log.error(self._say(f"cannot write the spool ({exc}); holding records in "
                                f"memory, {dropped} dropped; retrying in 1 s"))  # fmt: skip
            self._arm_spool_timer(SPOOL_RETRY_S)
            return
        finally:
            self._writing = None
        self._ready.set()

    def _arm_spool_timer(self, delay: float) -> None:
        if self._spool_timer is None:
            self._spool_timer = self._loop.call_later(max(0.0, delay), self._spool_check)

    def _spool_check(self) -> None:
        self._spool_timer = None
        self._wake.set()

    def _forget_held(self, boot_id: str, seq: int) -> None:
        """Acknowledged (or rejected) up to seq: no longer held in memory."""
        held = self._held
        if boot_id == self.boot_id:
            while held and held[0][0] <= seq:
                held.popleft()
        if not held and self._spool_timer is not None:
            self._spool_timer.cancel()
            self._spool_timer = None

    def _held_batch(self) -> Batch | None:
        """The oldest held records that fit in one samples frame."""
        held = self._held
        budget = protocol.MAX_FRAME_BYTES - protocol.FRAME_OVERHEAD
        bodies = []
        for _seq, body, _ in held:
            cost = len(body) + (1 if bodies else 0)
            if cost > budget or len(bodies) >= protocol.MAX_RECORDS_PER_FRAME:
                break
            bodies.append(body)
            budget -= cost
        if not bodies:
            seq = held.popleft()[0]
            log.error(self._say(f"dropped record seq {seq}: larger than a frame"))
            return None
        first, last = held[0][0], held[len(bodies) - 1][0]
        return Batch(boot_id=self.boot_id, first_id=-1, last_id=-1, first_seq=first,
                     last_seq=last, count=len(bodies),
                     text=protocol.samples_frame(self.boot_id, bodies), spooled=False)  # fmt: skip

    # -- connection -------------------------------------------------------------

    async def _connect_loop(self) -> None:
        while True:
            try:
                await self._connection()
                delay = self.backoff.next_delay()
            except FatalError:
                raise
            except _Reconnect as exc:
                delay = 0.0 if exc.immediate else self.backoff.next_delay()
                log.warning(self._say(f"{exc} (reconnecting in {delay:.1f} s)"))
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                delay = self.backoff.next_delay()
                wrong_url = self._wrong_url(exc)
                if wrong_url:
                    raise FatalError(self._say(wrong_url)) from None
                if isinstance(exc, InvalidStatus) and exc.response.status_code in (401, 403):
                    message = f"the server refused the token (HTTP {exc.response.status_code})"
                    if not self.retry_auth:
                        raise FatalError(self._say(message)) from None
                    log.error(self._say(f"{message} (retrying in {delay:.1f} s)"))
                else:
                    log.error(
                        self._say(
                            f"cannot reach {self.server}: {describe_failure(exc)} "
                            f"(retrying in {delay:.1f} s)"
                        )
                    )
            except Exception as exc:  # keep serving: one bad connection must not end the agent
                delay = self.backoff.next_delay()
                log.error(self._say(f"connection failed: {exc!r} (retrying in {delay:.1f} s)"))
                log.debug("connection failure", exc_info=True)
            await asyncio.sleep(delay)

    def _wrong_url(self, exc: BaseException) -> str | None:
        """Why retrying cannot help when the handshake was refused for the URL itself: a
        4xx other than 401/403/429, or a 403 from a path that is not the agent endpoint."""
        if not isinstance(exc, InvalidStatus):
            return None
        status = exc.response.status_code
        path = urlsplit(self.server).path
        if status in (401, 429) or status >= 500 or status < 400:
            return None
        if status == 403 and path.rstrip("/").endswith("/ws/agent"):
            return None  # the endpoint itself refused: the token's message applies
        return (f"{self.server} is not the console's agent endpoint (HTTP {status}); "
                f"--server should end in /ws/agent/, e.g. wss://console.example/ws/agent/")

    def _refused(self, message: str) -> None:
        """Stop the agent, unless --retry-auth asks to keep trying."""
        if not self.retry_auth:
            raise FatalError(self._say(message))
        raise _Reconnect(f"{message}; retrying because of --retry-auth")

    def _current_token(self) -> str:
        if self.token_file:
            try:
                fresh = open(self.token_file, encoding="utf-8").read().strip()
            except OSError as exc:
                log.warning(self._say(f"cannot reread {self.token_file} ({exc.strerror}); keeping the token in use"))
            else:
                if fresh and fresh != self.token and " " not in fresh:
                    log.info(self._say(f"using the new token from {self.token_file}"))
                    self.token = fresh
        return self.token

    async def _connection(self) -> None:
        headers = {"Authorization": f"Bearer {self._current_token()}"}
        async with connect(
            self.server,
            additional_headers=headers,
            user_agent_header=protocol.AGENT,
            open_timeout=10,
            close_timeout=2,
            max_size=1 << 20,
            compression=None,
        ) as ws:
            inflight: Batch | None = None
            try:
                self._rehello.clear()  # this hello carries the current GPUs
                await ws.send(
                    protocol.hello_frame(
                        host=self.host,
                        boot_id=self.boot_id,
                        backend=self.backend,
                        gpus=self.gpus,
                        driver=self.driver,
                    )
                )
                await self._await_welcome(ws)
                log.info(self._say(f"connected to {self.server} (boot {self.boot_id})"))
                self._closed_seen = False
                watcher = asyncio.create_task(self._watch_closed(ws))
                try:
                    while True:
                        inflight = await self._next_batch(ws)
                        await ws.send(inflight.text)
                        await self._await_ack(ws, inflight)
                        self.backoff.reset()
                        inflight = None
                        await self._hello_again_if_needed(ws)
                finally:
                    watcher.cancel()
            except ConnectionClosed as exc:
                self._closed(exc, inflight)
            except asyncio.CancelledError:
                await asyncio.shield(ws.close(1000, "agent stopping"))
                raise

    async def _watch_closed(self, ws) -> None:
        await ws.wait_closed()
        self._closed_seen = True
        self._ready.set()

    async def _hello_again_if_needed(self, ws) -> None:
        if self._rehello.is_set():
            self._rehello.clear()
            await ws.close(1000, "inventory changed")
            raise _Reconnect("the GPUs changed: saying hello again", immediate=True)

    def _closed(self, exc: ConnectionClosed, inflight: Batch | None) -> None:
        code = exc.rcvd.code if exc.rcvd is not None else 1006
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        error, self._last_error = self._last_error, None
        if error is not None:
            reason = error.message or error.code
        action = protocol.close_action(code)
        text = protocol.describe_close(code, reason)
        if action == protocol.FATAL:
            if code == protocol.CLOSE_VERSION:
                raise FatalError(self._say(f"the server does not speak protocol v1 ({text})"))
            self._refused(f"the server refused this agent ({text})")
        if action == protocol.DROP and inflight is not None:
            if inflight.spooled:
                self.spool.drop(inflight)
            else:
                self._forget_held(inflight.boot_id, inflight.last_seq)
                if len(self.spool):  # moved to the spool while in flight
                    self.spool.ack(inflight.boot_id, inflight.last_seq)
            log.error(
                self._say(
                    f"server rejected records {inflight.first_seq}-{inflight.last_seq} of boot "
                    f"{inflight.boot_id} ({text}); dropped them from the spool"
                )
            )
            raise _Reconnect("reconnecting after a rejected batch", immediate=True)
        raise _Reconnect(f"server closed the connection ({text})")

    async def _recv(self, ws, timeout: float) -> protocol.Welcome | protocol.Ack:
        """The next welcome or ack; errors are kept for the close, other frames dealt with."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            async with asyncio.timeout(left):
                text = await ws.recv()
            frame = await self._take(ws, text)
            if frame is not None:
                return frame

    async def _take(self, ws, text) -> protocol.Welcome | protocol.Ack | None:
        """A welcome or ack for the caller, or None when the frame was dealt with here."""
        kind = protocol.server_frame_type(text)
        if kind is None:
            log.warning(self._say("ignored a server frame that is not a JSON object with a type"))
            return None
        if kind == "ruleset":  # the firewall reads it whole, and reports a ruleset it refuses
            await firewall.answer(ws, text, self.network)
            return None
        if kind not in protocol.SERVER_FRAME_TYPES:
            log.debug("skipped a server frame of type %r", kind[:40])  # a newer server's
            return None
        try:
            frame = protocol.parse_server_frame(text)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning(self._say(f"ignored a malformed {kind[:40]!r} frame from the server: {exc}"))
            return None
        if type(frame) is protocol.Error:
            # Reported with the close that follows it, as one line.
            self._last_error = frame
            log.debug("server error frame: %s", frame)
            return None
        if type(frame) is protocol.Ack:
            await self._apply_ack(frame)
        elif type(frame) is protocol.DiagnosticsRequest:  # collected and uploaded off the event loop
            asyncio.ensure_future(asyncio.to_thread(diagnostics.answer, frame, server=self.server, token=self.token))
            return None
        return frame

    async def _wait_reading(self, ws) -> None:
        """Wait for records to send, reading what the server sends meanwhile (a new
        ruleset is applied now, not after the next sample)."""
        ready = asyncio.ensure_future(self._ready.wait())
        incoming = None
        try:
            while not ready.done():
                incoming = asyncio.ensure_future(ws.recv())
                await asyncio.wait([ready, incoming], return_when=asyncio.FIRST_COMPLETED)
                if not incoming.done():
                    incoming.cancel()  # recv() is safe to cancel: nothing is lost
                    await asyncio.gather(incoming, return_exceptions=True)
                if incoming.done() and not incoming.cancelled():
                    await self._take(ws, incoming.result())  # a closed socket raises here
        finally:
            ready.cancel()
            if incoming is not None and not incoming.done():  # this wait was itself cancelled
                incoming.cancel()
                incoming.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _await_welcome(self, ws) -> None:
        deadline = time.monotonic() + protocol.WELCOME_TIMEOUT_S
        frame = None
        try:
            while type(frame) is not protocol.Welcome:  # an ack before the welcome: skipped
                frame = await self._recv(ws, deadline - time.monotonic())
        except TimeoutError:
            await ws.close(1011, "no welcome")
            raise _Reconnect("no welcome from the server") from None
        if frame.v != protocol.VERSION:
            raise FatalError(self._say(f"the server speaks protocol v{frame.v}, not v1"))
        self._check_clock(frame.server_time)

    def _check_clock(self, server_time: float | None) -> None:
        if self._skew_warned or server_time is None:
            return
        skew = time.time() - server_time
        if abs(skew) > CLOCK_SKEW_WARNING_S:
            self._skew_warned = True
            log.warning(self._say(f"this host's clock is {skew:+.1f} s off the server's"))

    async def _next_batch(self, ws) -> Batch:
        """The oldest records not yet acknowledged: the spool's first, then memory's."""
        while True:
            writing = self._writing
            if writing is not None and not writing.done():  # on their way to the spool: older
                await asyncio.wait([writing])
                continue
            self._ready.clear()
            if len(self.spool):
                batch = await asyncio.to_thread(self.spool.oldest_batch)
                if batch is not None:
                    return batch
            if self._held:
                batch = self._held_batch()
                if batch is not None:
                    return batch
                continue
            await self._wait_reading(ws)
            await self._hello_again_if_needed(ws)
            if self._closed_seen:
                await ws.recv()  # raises ConnectionClosed with the close code

    async def _await_ack(self, ws, batch: Batch) -> None:
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while True:
            try:
                frame = await self._recv(ws, deadline - time.monotonic())
            except TimeoutError:
                await ws.close(1011, "no ack")
                raise _Reconnect(f"no ack within {ACK_TIMEOUT_S:.0f} s") from None
            if type(frame) is protocol.Ack and frame.boot_id == batch.boot_id and frame.seq >= batch.last_seq:
                return

    async def _apply_ack(self, ack: protocol.Ack) -> None:
        self._forget_held(ack.boot_id, ack.seq)
        writing = self._writing
        if writing is not None and not writing.done():
            await asyncio.wait([writing])
        if len(self.spool):
            await asyncio.to_thread(self.spool.ack, ack.boot_id, ack.seq)
