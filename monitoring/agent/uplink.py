"""One host's way to the server: outbox -> spool -> websocket, with acks and retries.

Sampling threads hand records to the :class:`Outbox` (numbered, encoded, kept in
memory). A flusher moves them to the spool in batches, off the event loop. The
sender sends the spool's oldest records, one frame at a time, and forgets them
only when the server acknowledges them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import socket
import sqlite3
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from . import protocol
from .outbox import Outbox
from .spool import Batch, Spool

log = logging.getLogger("gpuconsole.agent")

WELCOME_TIMEOUT_S = 10.0
ACK_TIMEOUT_S = 30.0
CLOCK_SKEW_WARNING_S = 2.0


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
        self._last_error: dict | None = None
        self._rehello: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._spooled: asyncio.Event | None = None
        self._skew_warned = False
        self._writing: asyncio.Future | None = None

    # -- plumbing ---------------------------------------------------------------

    def _say(self, text: str) -> str:
        return f"{self.label}: {text}" if self.label else text

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wake = asyncio.Event()
        self._spooled = asyncio.Event()
        self._rehello = asyncio.Event()
        wake = self._wake
        self.outbox.notify = lambda: loop.call_soon_threadsafe(wake.set)

    def update_gpus(self, gpus: list[dict]) -> None:
        """The host's GPUs changed: reconnect and say hello again (same boot_id)."""
        self.gpus = gpus
        self._rehello.set()

    @property
    def drained(self) -> bool:
        """Everything sampled so far is acknowledged (nothing held, being spooled, or spooled)."""
        return len(self.outbox) == 0 and self._writing is None and len(self.spool) == 0

    def flush_now(self) -> None:
        """Move whatever the outbox holds into the spool (used at shutdown)."""
        self.spool.append(self.boot_id, self.outbox.take())

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
            if not rows:
                continue
            self._writing = asyncio.ensure_future(
                asyncio.to_thread(self.spool.append, self.boot_id, rows)
            )
            try:
                await asyncio.shield(self._writing)
            except (OSError, sqlite3.Error) as exc:
                dropped = self.outbox.put_back(rows, keep=self.spool.max_records)
                log.error(self._say(f"cannot write the spool ({exc}); holding records in "
                                    f"memory, {dropped} dropped; retrying in 1 s"))  # fmt: skip
                await asyncio.sleep(1.0)
                self._wake.set()
                continue
            finally:
                self._writing = None
            self._spooled.set()

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
                while True:
                    inflight = await self._next_batch(ws)
                    await ws.send(inflight.text)
                    await self._await_ack(ws, inflight)
                    self.backoff.reset()
                    inflight = None
                    await self._hello_again_if_needed(ws)
            except ConnectionClosed as exc:
                self._closed(exc, inflight)
            except asyncio.CancelledError:
                await asyncio.shield(ws.close(1000, "agent stopping"))
                raise

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
            reason = str(error.get("message") or error.get("code") or reason)
        action = protocol.close_action(code)
        text = protocol.describe_close(code, reason)
        if action == protocol.FATAL:
            if code == protocol.CLOSE_VERSION:
                raise FatalError(self._say(f"the server does not speak protocol v1 ({text})"))
            self._refused(f"the server refused this agent ({text})")
        if action == protocol.DROP and inflight is not None:
            self.spool.drop(inflight)
            log.error(
                self._say(
                    f"server rejected records {inflight.first_seq}-{inflight.last_seq} of boot "
                    f"{inflight.boot_id} ({text}); dropped them from the spool"
                )
            )
            raise _Reconnect("reconnecting after a rejected batch", immediate=True)
        raise _Reconnect(f"server closed the connection ({text})")

    async def _recv(self, ws, timeout: float) -> dict:
        """The next well-formed server frame; errors are logged, unknown types skipped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            text = await asyncio.wait_for(ws.recv(), left)
            frame = protocol.parse_server_frame(text)
            if frame is None:
                log.warning(self._say("ignored a server frame that is not a JSON object"))
                continue
            if frame["type"] == "error":
                # Reported with the close that follows it, as one line.
                self._last_error = frame
                log.debug("server error frame: %s", frame)
                continue
            if frame["type"] == "ack":
                await self._apply_ack(frame)
            return frame

    async def _await_welcome(self, ws) -> None:
        deadline = time.monotonic() + WELCOME_TIMEOUT_S
        frame = {"type": None}
        try:
            while frame["type"] != "welcome":  # frame types this agent does not know: skipped
                frame = await self._recv(ws, deadline - time.monotonic())
        except TimeoutError:
            await ws.close(1011, "no welcome")
            raise _Reconnect("no welcome from the server") from None
        if frame.get("v") != protocol.VERSION:
            raise FatalError(self._say(f"the server speaks protocol v{frame.get('v')}, not v1"))
        self._check_clock(frame.get("server_time"))

    def _check_clock(self, server_time) -> None:
        if self._skew_warned or not isinstance(server_time, int | float):
            return
        skew = time.time() - server_time
        if abs(skew) > CLOCK_SKEW_WARNING_S:
            self._skew_warned = True
            log.warning(self._say(f"this host's clock is {skew:+.1f} s off the server's"))

    async def _next_batch(self, ws) -> Batch:
        while True:
            self._spooled.clear()
            batch = await asyncio.to_thread(self.spool.oldest_batch)
            if batch is not None:
                return batch
            waiter = asyncio.create_task(self._spooled.wait())
            closed = asyncio.create_task(ws.wait_closed())
            rehello = asyncio.create_task(self._rehello.wait())
            try:
                done, _ = await asyncio.wait(
                    {waiter, closed, rehello}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for task in (waiter, closed, rehello):
                    task.cancel()
            await self._hello_again_if_needed(ws)
            if closed in done:
                await ws.recv()  # raises ConnectionClosed with the close code

    async def _await_ack(self, ws, batch: Batch) -> None:
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while True:
            try:
                frame = await self._recv(ws, deadline - time.monotonic())
            except TimeoutError:
                await ws.close(1011, "no ack")
                raise _Reconnect(f"no ack within {ACK_TIMEOUT_S:.0f} s") from None
            if (
                frame["type"] == "ack"
                and frame.get("boot_id") == batch.boot_id
                and isinstance(frame.get("seq"), int)
                and frame["seq"] >= batch.last_seq
            ):
                return

    async def _apply_ack(self, frame: dict) -> None:
        boot_id, seq = frame.get("boot_id"), frame.get("seq")
        if isinstance(boot_id, str) and isinstance(seq, int) and not isinstance(seq, bool):
            await asyncio.to_thread(self.spool.ack, boot_id, seq)
