"""The current reading of a GPU or MIG slice: the keys of the browser's reading
(``agent.protocol.LiveReading``, the ``gpus`` event of docs/live-protocol.md), for live
browsers, pages and the instance summary.

``live`` makes the browser's reading from a decoded record (its ``Metrics`` as they
are) with what the fan-out routes, orders and stores it by (``Live``); ``current`` and
``of_latest`` make the same keys as a dict for pages, from a ``GpuLatest`` row.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from agent.protocol import LiveReading, Metrics

PUBLIC_KEYS = LiveReading.__struct_fields__


_last_time: tuple[float, str] = (float("nan"), "")  # the last reading time as text: a tick's share it


def _time_text(t: float | datetime) -> str:
    global _last_time
    if isinstance(t, datetime):
        return t.isoformat()
    last = _last_time  # one read: another thread may replace it meanwhile
    if last[0] == t:
        return last[1]
    text = datetime.fromtimestamp(t, tz=UTC).isoformat()
    _last_time = (t, text)
    return text


def current(*, uuid: str, t: float | datetime, m: dict, stale: bool, host: str = "", index: int | None = None,
            instance: int | None = None, team: int | None = None) -> dict:
    return {"uuid": uuid, "host": host, "index": index, "instance": instance, "team": team,
            "t": _time_text(t), "m": m, "stale": stale}


class Live(msgspec.Struct, gc=False):
    """A reading as the ingest hands it to the fan-out: the browser's reading, and its
    time in seconds, host and device ids (what the fan-out routes and orders by and the
    latest-reading row names; never sent to a browser)."""

    reading: LiveReading
    t: float
    host_id: int
    gpu_id: int | None = None
    slice_id: int | None = None


def live(*, uuid: str, host_id: int, host: str, device, t: float, m: Metrics, instance: int | None,
         team: int | None, stale: bool = False) -> Live:
    """``device`` is ``ingest.Device``; ``m`` the record's metrics, kept as decoded."""
    reading = LiveReading(uuid, host, device.index, instance, team, _time_text(t), m, stale)
    return Live(reading, t, host_id, device.gpu_id, device.slice_id)


def stale_live(row, *, host: str, index: int | None) -> Live:
    """A ``GpuLatest`` row's reading marked stale, for the fan-out."""
    reading = LiveReading(row.uuid, host, index, row.instance_id, row.team_id, _time_text(row.time),
                          msgspec.convert(row.metrics, Metrics), True)
    return Live(reading, row.time.timestamp(), row.host_id, row.gpu_id, row.slice_id)


def of_latest(row, *, now=None, after_s: float | None = None, host: str = "", index: int | None = None) -> dict:
    """From a ``GpuLatest`` row; ``host`` and ``index`` when the caller has them at hand."""
    return current(uuid=row.uuid, t=row.time, m=row.metrics, stale=row.is_stale(now, after_s), host=host,
                   index=index, instance=row.instance_id, team=row.team_id)
