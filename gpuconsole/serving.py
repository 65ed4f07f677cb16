"""How daphne serves our websockets: bounded frames and bounded buffering.

daphne reads every websocket as fast as the peer writes and queues each message for the
application without limit, so an agent that floods without waiting for its acks grows
the server's memory without bound; and a message over its size limit makes autobahn
drop the TCP connection (the peer sees 1006, not the documented close code).
``install()`` (called by gpuconsole.asgi) swaps in a protocol that

- stops reading a socket while ``QUEUE_HIGH`` of its messages wait for the application
  and reads again at ``QUEUE_LOW``: TCP then pushes back on the peer, and the
  consumer sees the flood and closes it (/ws/agent/: 4429);
- refuses a message over ``WEBSOCKET_MAX_MESSAGE_BYTES`` (512 KiB, the agent protocol's
  frame limit) as soon as its header announces it, with the path's documented error
  and close 4413, reading the rest of it only to discard it.
"""

from __future__ import annotations

import json
import logging

from django.conf import settings

logger = logging.getLogger(__name__)

QUEUE_HIGH = 16  # messages waiting for the application: stop reading the socket
QUEUE_LOW = 4  # ... and read again once this few wait
RESUME_CHECK_S = 0.02
CLOSE_TOO_LARGE = 4413


def max_message_bytes() -> int:
    return int(settings.WEBSOCKET_MAX_MESSAGE_BYTES)


def too_large_frame(path: str, size: int, limit: int) -> str:
    """The error a peer gets before the 4413 close, in the shape its protocol documents."""
    message = f"a message of {size} bytes exceeds the limit of {limit}"
    if path.startswith("/ws/live/"):
        return json.dumps({"event": "error", "data": {"message": message}})
    return json.dumps({"type": "error", "code": "frame_too_large", "message": message})


def protocol_class():
    from daphne.ws_protocol import WebSocketProtocol
    from twisted.internet import reactor

    class BoundedWebSocketProtocol(WebSocketProtocol):
        paused = False

        def _connectionMade(self):
            super()._connectionMade()
            limit = max_message_bytes()
            # daphne's own default is 1 MiB; never more than the protocol allows.
            for option in ("maxMessagePayloadSize", "maxFramePayloadSize"):
                if not 0 < getattr(self, option) <= limit:
                    setattr(self, option, limit)

        def onMessage(self, payload, isBinary):
            super().onMessage(payload, isBinary)
            queue = getattr(self, "application_queue", None)
            if queue is not None and not self.paused and queue.qsize() >= QUEUE_HIGH:
                self.paused = True
                self.transport.pauseProducing()
                reactor.callLater(RESUME_CHECK_S, self._resume_when_drained)

        def _resume_when_drained(self):
            if self.state == self.STATE_CLOSED or self.application_queue.qsize() <= QUEUE_LOW:
                self.paused = False
                if self.state != self.STATE_CLOSED:
                    self.transport.resumeProducing()
            else:
                reactor.callLater(RESUME_CHECK_S, self._resume_when_drained)

        def _max_message_size_exceeded(self, msg_size, max_msg_size, reason):
            if self.failedByMe or self.state != self.STATE_OPEN:
                return
            path = getattr(getattr(self, "request", None), "path", "") or ""
            logger.warning("refused a websocket message on %s from %s: %s", path, self.client_addr, reason)
            self.sendMessage(too_large_frame(path, msg_size, max_msg_size).encode(), isBinary=False)
            self.failedByMe = True  # the rest of this message is read and thrown away
            self.sendCloseFrame(code=CLOSE_TOO_LARGE, reasonUtf8=b"frame_too_large", isReply=False)

    return BoundedWebSocketProtocol


# What protocol_class() relies on in daphne's protocol and autobahn's beneath it.
HOOKS = ("_connectionMade", "onMessage", "_max_message_size_exceeded", "sendCloseFrame",
         "sendMessage", "STATE_OPEN", "STATE_CLOSED")


def missing_hooks(protocol) -> list[str]:
    return [name for name in HOOKS if not hasattr(protocol, name)]


def install() -> None:
    """Serve websockets with ``protocol_class()`` when running under daphne.

    Refuses to start (ImproperlyConfigured) when an upgraded daphne or autobahn no longer
    has a hook this relies on: silently serving unbounded sockets would be worse.
    """
    try:
        from daphne.ws_protocol import WebSocketFactory, WebSocketProtocol
    except ImportError:  # another ASGI server: its own limits apply
        return
    missing = missing_hooks(WebSocketProtocol)
    if missing:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "gpuconsole.serving cannot bound websockets with this daphne/autobahn: "
            f"{', '.join(missing)} missing from daphne's WebSocketProtocol; "
            "pin the versions pyproject.toml names"
        )
    if not getattr(WebSocketFactory.protocol, "bounded", False):
        WebSocketFactory.protocol = protocol_class()
        WebSocketFactory.protocol.bounded = True
