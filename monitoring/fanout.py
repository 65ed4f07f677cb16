"""Coalesced live GPU updates.

Writers hand every stored reading to ``offer``; at most once per ``LIVE_COALESCE_S``
(default 0.25 s; the first reading after a quiet interval goes at once, with those of the
writes already under way) the newest reading of each GPU goes out as one ``gpus`` event per
group: ``fleet`` (every GPU), ``host.<id>``, ``team.<id>`` and ``instance.<id>`` (only
their own GPUs). A browser gets a few messages a second, however many GPUs report.
The groups are sent together, one ``group_send`` per group that has a member (most host
groups have none: nobody has their page open), as ``live.gpus`` messages.

Every server process coalesces the readings its own agents send, so with N ASGI
workers a group hears from up to N coalescers, and a socket subscribed to a team and
one of its instances hears each reading twice. So each live socket merges again
(``SocketMerge``): at most one batch per interval, each reading once.

A reading is serialised once, by the coalescer that publishes it: a ``live.gpus``
message carries ``readings``, one string (``pack``) holding each reading's browser JSON
behind the GPU and the order the socket merges by. Sockets join those texts as they
are; nothing is parsed or copied per socket (the in-memory layer deep-copies every
message for every socket it reaches, a string at no cost). A batch over the websocket
message limit (``WEBSOCKET_MAX_MESSAGE_BYTES``) goes out as several ``gpus`` messages,
each under it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from datetime import timedelta

import msgspec
from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone

from agent.protocol import GPUS_HEAD, GPUS_TAIL
from console.live import (
    FLEET_GROUP,
    host_group,
    instance_group,
    send_each,
    team_group,
)

from .readings import PUBLIC_KEYS, Live, stale_live

log = logging.getLogger(__name__)


def interval_s() -> float:
    return float(getattr(settings, "LIVE_COALESCE_S", 0.25))


def groups_of(entry: Live) -> list[str]:
    groups = [FLEET_GROUP, host_group(entry.host_id)]
    reading = entry.reading
    if reading.team:
        groups.append(team_group(reading.team))
    if reading.instance:
        groups.append(instance_group(reading.instance))
    return groups


# ``pack``: readings are separated by RECORD, a reading's fields by FIELD. Neither can
# occur in the JSON text (JSON escapes every control character) nor in a GPU or slice
# UUID (the agent protocol allows letters, digits, "-" and "/").
RECORD = "\x1e"
FIELD = "\x1f"
_json = msgspec.json.Encoder()  # the same text as json.dumps(separators=(",", ":")), faster


def pack(entry: Live) -> str:
    """One reading as a ``live.gpus`` message carries it: its time in seconds and stale
    flag (the order a socket's merge keeps), its UUID, and the browser's JSON of it
    (``LiveReading``, encoded once here)."""
    reading = entry.reading
    text = _json.encode(reading).decode()
    return f"{entry.t!r}{FIELD}{int(reading.stale)}{FIELD}{reading.uuid}{FIELD}{text}"


def unpack(packed: str) -> list[tuple[str, tuple[float, bool], str]]:
    """(uuid, (t, stale), browser JSON) of each reading in a ``readings`` string."""
    out = []
    for record in packed.split(RECORD) if packed else ():
        t, stale, uuid, text = record.split(FIELD, 3)
        out.append((uuid, (float(t), stale == "1"), text))
    return out


class Heard:
    """A ``readings`` string, read once for every socket of this process that hears it
    (``heard``): its readings in order, their (t, stale) by UUID, and, made on first
    use, its browser messages, for the sockets that send it as it is."""

    __slots__ = ("items", "keys", "_texts")

    def __init__(self, packed: str):
        self.items = unpack(packed)
        self.keys = {uuid: key for uuid, key, _ in self.items}
        self._texts: tuple[int, list[str]] | None = None

    def texts(self, limit: int) -> list[str]:
        if self._texts is None or self._texts[0] != limit:
            self._texts = (limit, gpus_texts([text for _, _, text in self.items], limit))
        return self._texts[1]


@functools.lru_cache(maxsize=64)
def heard(packed: str) -> Heard:
    """The in-memory layer hands every socket the same string; Redis, equal ones."""
    return Heard(packed)


def split(entries: list[Live]) -> dict[str, list[str]]:
    """{group: [packed reading, …]} for a set of readings; each is serialised once,
    however many groups it goes to."""
    by_group: dict[str, list[str]] = {}
    for entry in entries:
        packed = pack(entry)
        for group in groups_of(entry):
            by_group.setdefault(group, []).append(packed)
    return by_group


def gpus_message(packed: list[str]) -> dict:
    """The channel-layer message of a ``gpus`` event (see ``SocketMerge``)."""
    return {"type": "live.gpus", "readings": RECORD.join(packed)}


def sends(entries: list[Live]) -> list[tuple[str, dict]]:
    return [(group, gpus_message(packed)) for group, packed in split(entries).items()]


def readings_of(message: dict) -> str:
    """The ``readings`` of a ``live.gpus`` message, also from a worker of an earlier
    release, whose messages carried ``gpus``: a list of readings as dicts."""
    if "readings" in message:
        return message["readings"]
    return RECORD.join(_pack_dict(gpu) for gpu in message.get("gpus", ()))


def _pack_dict(gpu: dict) -> str:
    text = _json.encode({k: gpu[k] for k in PUBLIC_KEYS}).decode()
    return f"{gpu['_t']!r}{FIELD}{int(gpu['stale'])}{FIELD}{gpu['uuid']}{FIELD}{text}"


QUIET_S = 0.03  # a burst of agent frames has ended once none came for this long


class Coalescer:
    """One event per group per ``interval``; see the module docstring.

    The ingest says when an agent frame arrives (``writing``) and hands its readings
    over once they are attributed (``written``). A flush that could go at once (the
    leading edge) first waits for the burst to end, at most ``interval`` in all: until
    the frames that arrived are attributed and no other has come for ``QUIET_S``.
    Agents that sample in step send a burst of frames, which the server reads over tens
    of milliseconds; the whole burst then goes out in one event instead of its first
    frames at once and the rest a full interval later.
    """

    def __init__(self, interval: float):
        self.interval = interval
        self.pending: dict[str, Live] = {}
        self.task: asyncio.Task | None = None
        self.sent = 0
        self.last_flush = float("-inf")
        self.busy = 0  # frames arrived, their readings not yet attributed
        self.arrived = float("-inf")  # loop time of the last frame's arrival
        self.idle = asyncio.Event()
        self.idle.set()

    def writing(self) -> None:
        self.busy += 1
        self.arrived = asyncio.get_running_loop().time()
        self.idle.clear()

    def written(self, latest: dict[str, Live]) -> None:
        self.busy = max(0, self.busy - 1)
        if latest:
            self.offer(latest)
        if not self.busy:
            self.idle.set()

    def offer(self, latest: dict[str, Live]) -> None:
        for uuid, entry in latest.items():
            kept = self.pending.get(uuid)
            if kept is None or entry.t >= kept.t:
                self.pending[uuid] = entry
        if self.task is None or self.task.done():
            # Leading edge: a reading after a quiet spell goes out at once (with the
            # writes under way); later ones wait for the rest of the interval, so a
            # group gets one event per interval.
            loop = asyncio.get_running_loop()
            delay = max(0.0, self.last_flush + self.interval - loop.time())
            self.task = loop.create_task(self._flush_after(delay))

    async def _flush_after(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.interval
        if delay:
            await asyncio.sleep(delay)
        while (now := loop.time()) < deadline:  # until the burst under way has ended
            if not self.idle.is_set():
                try:
                    await asyncio.wait_for(self.idle.wait(), deadline - now)
                except TimeoutError:
                    break
            elif now - self.arrived < QUIET_S:
                wanted = min(QUIET_S - (now - self.arrived), deadline - now)
                await asyncio.sleep(wanted)
                if loop.time() - now - wanted > QUIET_S / 3:
                    # The loop itself stalled (a collection, another thread holding the
                    # GIL): frames that came meanwhile are not read yet. A quiet spell
                    # counts only while the loop could have read them.
                    self.arrived = loop.time()
            else:
                break
        self.last_flush = loop.time()
        batch, self.pending = self.pending, {}
        out = sends(list(batch.values()))
        self.sent += len(out)
        await send_each(out, watched_only=True)
        if self.pending:  # offered while this flush was sending (offer saw it under way)
            self.task = loop.create_task(self._flush_after(max(0.0, self.last_flush + self.interval - loop.time())))


_by_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def coalescer() -> Coalescer:
    """This event loop's coalescer (one per server process)."""
    loop = asyncio.get_running_loop()
    found = _by_loop.get(loop)
    if found is None:
        found = _by_loop[loop] = Coalescer(interval_s())
    return found


def offer(latest: dict[str, Live]) -> None:
    if latest:
        coalescer().offer(latest)


def writing() -> None:
    """A write of samples starts; ``written`` must follow, whatever its outcome."""
    coalescer().writing()


def written(latest: dict[str, Live]) -> None:
    """A write of samples ended; ``latest`` are its newest readings (empty if it failed)."""
    coalescer().written(latest)


def publish_stale(*, now=None, window_s: float = 10.0) -> int:
    """Tell live views about GPUs that went quiet in the last ``window_s`` seconds."""
    from .models import GpuLatest, stale_after_s

    now = now or timezone.now()
    edge = now - timedelta(seconds=stale_after_s())
    rows = GpuLatest.objects.filter(last_seen__lte=edge, last_seen__gt=edge - timedelta(seconds=window_s))
    entries = [stale_live(row, host=row.host.name, index=row.gpu.index) for row in rows.select_related("host", "gpu")]
    if entries:
        async_to_sync(send_each)(sends(entries), watched_only=True)
    return len(entries)


NEVER = (float("-inf"), False)


def max_message_bytes() -> int:
    return int(settings.WEBSOCKET_MAX_MESSAGE_BYTES)


def size(text: str) -> int:
    """Bytes of ``text`` on the wire (UTF-8); ``isascii`` is a flag lookup, no scan."""
    return len(text) if text.isascii() else len(text.encode())


def gpus_texts(readings_json: list[str], limit: int) -> list[str]:
    """The ``gpus`` messages of a batch, in order, each at most ``limit`` bytes: the
    websocket refuses a larger message (autobahn raises, and its readings are lost)."""
    room = limit - len(GPUS_HEAD) - len(GPUS_TAIL)
    out, chunk, used = [], [], 0
    for text in readings_json:
        n = size(text)
        if n > room:  # cannot happen with the protocol's metrics; never sent whole
            log.error("a live reading of %d bytes exceeds the websocket message limit; not sent", n)
            continue
        if chunk and used + 1 + n > room:
            out.append(GPUS_HEAD + ",".join(chunk) + GPUS_TAIL)
            chunk, used = [], 0
        used += n + (1 if chunk else 0)
        chunk.append(text)
    if chunk:
        out.append(GPUS_HEAD + ",".join(chunk) + GPUS_TAIL)
    return out


class SocketMerge:
    """What one live socket sends of the ``live.gpus`` messages it hears.

    A reading (GPU, time) goes out once, and only if it is newer than what the socket
    last sent of that GPU (a stale mark counts as newer than the reading it marks);
    readings heard within ``interval`` of the last batch go out together, newest per
    GPU, at the end of it: one ``gpus`` message, or several in a row when the batch
    exceeds ``max_bytes``. ``send`` takes the browser's text.

    The usual case costs one comparison per reading: a message heard while nothing
    waits, every reading of it new to the socket, goes out as the texts made once for
    every socket (``Heard.texts``), unless another message joins it before the flush.
    """

    def __init__(self, interval: float, send, max_bytes: int | None = None):
        self.interval = interval
        self.send = send
        self.max_bytes = max_bytes or max_message_bytes()
        self.whole: Heard | None = None  # the batch is this message, as it is
        self.pending: dict[str, tuple[tuple[float, bool], str]] = {}  # uuid -> ((t, stale), JSON)
        self.shown: dict[str, tuple[float, bool]] = {}  # uuid -> (t, stale) last sent
        self.last_flush = float("-inf")
        self.task: asyncio.Task | None = None

    def add(self, packed: str) -> None:
        """Readings as ``live.gpus`` carries them (``pack``)."""
        message = heard(packed)
        shown, pending = self.shown, self.pending
        if (self.whole is None and not pending and len(message.keys) == len(message.items)
                and all(key > shown.get(uuid, NEVER) for uuid, key in message.keys.items())):
            self.whole = message
        else:
            if self.whole is not None:  # a second message: merge reading by reading
                pending.update((uuid, (key, text)) for uuid, key, text in self.whole.items)
                self.whole = None
            for uuid, key, text in message.items:
                if key <= shown.get(uuid, NEVER):
                    continue
                kept = pending.get(uuid)
                if kept is None or key > kept[0]:
                    pending[uuid] = (key, text)
        if (self.whole is not None or pending) and (self.task is None or self.task.done()):
            loop = asyncio.get_running_loop()
            delay = max(0.0, self.last_flush + self.interval - loop.time())
            self.task = loop.create_task(self._flush_after(delay))

    async def _flush_after(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        if delay:
            await asyncio.sleep(delay)
        self.last_flush = loop.time()
        if self.whole is not None:
            whole, self.whole = self.whole, None
            self.shown.update(whole.keys)
            texts = whole.texts(self.max_bytes)
        else:
            batch, self.pending = self.pending, {}
            for uuid, (key, _) in batch.items():
                self.shown[uuid] = key
            texts = gpus_texts([text for _, text in batch.values()], self.max_bytes)
        for text in texts:
            await self.send(text)
        if self.whole is not None or self.pending:  # heard while this flush was sending
            self.task = loop.create_task(self._flush_after(max(0.0, self.last_flush + self.interval - loop.time())))

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
