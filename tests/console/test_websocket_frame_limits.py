"""Under daphne, a websocket message over 512 KiB is refused with the documented error
and close 4413 (not a dropped connection), and a peer that writes faster than the
application reads is pushed back instead of buffered."""

import asyncio
import json

import pytest
import websockets
from daphne_support import LIMIT, ROOT, serve


@pytest.fixture(scope="module")
def daphne():
    with serve("asgi_apps.frames:application", ROOT / "tests" / "console") as base:
        yield base


async def exchange(url: str, path: str, size: int):
    """The server's answer to one message of ``size`` bytes, and its close code (None
    while it keeps the socket open)."""
    async with websockets.connect(url + path, max_size=None) as ws:
        await ws.send("x" * size)
        answer = await asyncio.wait_for(ws.recv(), 10)
        try:
            await asyncio.wait_for(ws.recv(), 2)
        except websockets.ConnectionClosed as closed:
            return answer, closed.rcvd.code if closed.rcvd else 1006
        except TimeoutError:
            return answer, None
        return answer, None


def test_a_message_at_the_limit_is_read(daphne):
    assert asyncio.run(exchange(daphne, "/ws/agent/", LIMIT)) == (str(LIMIT), None)


@pytest.mark.parametrize("size", [LIMIT + 1, 4 * 1024 * 1024])
def test_a_larger_agent_frame_gets_frame_too_large_and_4413(daphne, size):
    answer, code = asyncio.run(exchange(daphne, "/ws/agent/", size))
    assert json.loads(answer)["code"] == "frame_too_large"
    assert code == 4413


def test_a_larger_live_message_gets_the_live_error_and_4413(daphne):
    answer, code = asyncio.run(exchange(daphne, "/ws/live/", LIMIT + 1))
    assert json.loads(answer)["event"] == "error"
    assert code == 4413


async def flood(url: str, seconds: float) -> list[int]:
    """Bytes sent, each second, to an application that reads nothing."""
    sent, marks = 0, []
    ws = await websockets.connect(url + "/ws/agent/", max_size=None, ping_interval=None)
    try:
        await ws.send("hold")
        frame = "x" * (64 * 1024)
        loop = asyncio.get_running_loop()
        for _ in range(int(seconds)):
            deadline = loop.time() + 1
            while loop.time() < deadline:
                try:
                    await asyncio.wait_for(ws.send(frame), deadline - loop.time())
                except TimeoutError:
                    break  # the server stopped reading: the send waits on a full buffer
                sent += len(frame)
            marks.append(sent)
    finally:
        # A closing handshake would wait behind the unread bytes: drop the connection.
        ws.transport.abort()
    return marks


def test_a_peer_writing_faster_than_the_app_reads_is_pushed_back(daphne):
    marks = asyncio.run(flood(daphne, 5))
    # The server stops reading after 16 queued messages; once the kernel's buffers are
    # full the peer can send nothing more (without push-back it goes on for ever).
    assert marks[-1] == marks[-2] == marks[-3]
    assert marks[-1] < 32 * 1024 * 1024


def test_installed_daphne_has_every_hook_the_bounded_protocol_overrides():
    from daphne.ws_protocol import WebSocketProtocol

    from gpuconsole import serving

    assert serving.missing_hooks(WebSocketProtocol) == []


def test_a_daphne_without_those_hooks_is_refused_at_start(monkeypatch):
    from daphne.ws_protocol import WebSocketProtocol
    from django.core.exceptions import ImproperlyConfigured

    from gpuconsole import serving

    # the hook lives on one of autobahn's base classes: hide it there
    for base in WebSocketProtocol.__mro__:
        if "_max_message_size_exceeded" in vars(base):
            monkeypatch.delattr(base, "_max_message_size_exceeded")
    with pytest.raises(ImproperlyConfigured, match="_max_message_size_exceeded"):
        serving.install()
