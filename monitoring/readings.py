"""The current reading of a GPU or MIG slice: one shape for live browsers
(docs/live-protocol.md, the ``gpus`` event), pages and the instance summary.

``current`` builds it; ``live`` adds what the fan-out routes and orders by (keys
starting with ``_``, never sent); ``of_latest`` reads it from a ``GpuLatest`` row.
"""

from __future__ import annotations

from datetime import UTC, datetime

PUBLIC_KEYS = ("uuid", "host", "index", "instance", "team", "t", "m", "stale")


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


def live(*, uuid: str, host_id: int, host: str, device, t: float, m: dict, instance: int | None,
         team: int | None, stale: bool = False) -> dict:
    """A reading as the ingest hands it to the fan-out; ``device`` is ``ingest.Device``."""
    entry = current(uuid=uuid, t=t, m=m, stale=stale, host=host, index=device.index, instance=instance, team=team)
    entry.update(_t=t, _host_id=host_id, _gpu_id=device.gpu_id, _slice_id=device.slice_id)
    return entry


def of_latest(row, *, now=None, after_s: float | None = None, host: str = "", index: int | None = None) -> dict:
    """From a ``GpuLatest`` row; ``host`` and ``index`` when the caller has them at hand."""
    return current(uuid=row.uuid, t=row.time, m=row.metrics, stale=row.is_stale(now, after_s), host=host,
                   index=index, instance=row.instance_id, team=row.team_id)


def public(entry: dict) -> dict:
    return {k: entry[k] for k in PUBLIC_KEYS}
