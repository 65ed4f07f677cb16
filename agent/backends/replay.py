"""Replay a recorded NVML trace (see agent/traces/README.md) as one live GPU.

Each recorded sample is sent with the current time, keeping the recorded spacing
divided by ``speed``. Keys absent from a recorded line stay absent. The ``phase``
label is for tests only: it is kept on the trace lines and in ``last_phase``,
never sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import Emit, HostInfo, Source

NOT_METRICS = ("t", "phase", "processes")
COUNTERS = ("energy_mj", "pcie_tx_bytes", "pcie_rx_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes")


class TraceError(Exception):
    pass


@dataclass(frozen=True)
class TraceLine:
    t: float
    phase: str | None
    m: dict
    procs: list[dict] | None


@dataclass(frozen=True)
class Trace:
    static: dict
    plan: list
    period_s: float
    lines: list[TraceLine]

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None
        rows = text.splitlines()
        if not rows:
            raise TraceError(f"trace {path} is empty")
        head = _json_line(path, 1, rows[0])
        static = head.get("static")
        if not isinstance(static, dict):
            raise TraceError(f'trace {path} line 1: no "static" object')
        for key in ("uuid", "name", "memory_total"):
            if key not in static:
                raise TraceError(f"trace {path} line 1: static.{key} is missing")
        lines = []
        for number, row in enumerate(rows[1:], start=2):
            if row.strip():
                lines.append(_trace_line(path, number, _json_line(path, number, row)))
        if not lines:
            raise TraceError(f"trace {path} has no samples")
        period = head.get("period_s", 1.0)
        return cls(static=static, plan=head.get("plan", []), period_s=float(period), lines=lines)

    def gpu(self) -> dict:
        s = self.static
        gpu = {
            "uuid": s["uuid"],
            "index": int(s.get("index", 0)),
            "name": s["name"],
            "memory_total": int(s["memory_total"]),
            "mig_mode": bool(s.get("mig_mode", 0)),
            "slices": [],
        }
        if s.get("pci_bus_id"):
            gpu["pci_bus_id"] = s["pci_bus_id"]
        if s.get("power_limit_mw"):
            gpu["power_limit_mw"] = int(s["power_limit_mw"])
        return gpu


def _json_line(path, number: int, row: str) -> dict:
    try:
        value = json.loads(row)
    except ValueError:
        raise TraceError(f"trace {path} line {number}: not valid JSON") from None
    except RecursionError:
        raise TraceError(f"trace {path} line {number}: JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise TraceError(f"trace {path} line {number}: not a JSON object")
    return value


def _trace_line(path, number: int, row: dict) -> TraceLine:
    t = row.get("t")
    if not isinstance(t, int | float):
        raise TraceError(f'trace {path} line {number}: "t" is missing or not a number')
    m = {k: v for k, v in row.items() if k not in NOT_METRICS}
    procs = row.get("processes")
    return TraceLine(t=float(t), phase=row.get("phase"), m=m, procs=procs)


class ReplaySource(Source):
    name = "replay"

    def __init__(self, trace: Trace, *, host: str, speed: float = 1.0, once: bool = False):
        super().__init__()
        self.trace = trace
        self.host = host
        self.speed = speed
        self.once = once
        self.uuid = trace.static["uuid"]
        self.last_phase: str | None = None
        self.sent = 0

    def hosts(self) -> list[HostInfo]:
        driver = self.trace.static.get("driver")
        return [HostInfo(self.host, [self.trace.gpu()], driver=driver)]

    def frames(self) -> Iterator[tuple[float, TraceLine, dict]]:
        """(delay before it, trace line, metrics) for each sample, looping unless once.

        On each new pass the cumulative counters carry on from where the last pass
        ended, so that they never run backwards.
        """
        lines = self.trace.lines
        offsets = dict.fromkeys(COUNTERS, 0)
        previous_t = None
        while True:
            for line in lines:
                gap = 0.0 if previous_t is None else max(0.0, line.t - previous_t)
                previous_t = line.t
                m = dict(line.m)
                for key, offset in offsets.items():
                    if offset and key in m:
                        m[key] += offset
                yield gap / self.speed, line, m
            if self.once:
                return
            previous_t = lines[0].t - self.trace.period_s
            for key in COUNTERS:
                first, last = _first_value(lines, key), _last_value(lines, key)
                if first is not None and last is not None:
                    offsets[key] += last - first

    def record(self, line: TraceLine, m: dict, now: float) -> dict:
        record = {"t": now, "gpu": self.uuid, "m": m}
        if line.procs is not None:
            record["procs"] = [dict(p) for p in line.procs]
        return record

    def start(self, emit: Emit, loop=None) -> None:
        self.spawn(lambda: self._play(emit), "replay")

    def _play(self, emit: Emit) -> None:
        due = time.monotonic()
        for delay, line, m in self.frames():
            due += delay
            wait = due - time.monotonic()
            if wait > 0 and self.stop_event.wait(wait):
                return
            if self.stop_event.is_set():
                return
            self.last_phase = line.phase
            emit(self.host, [self.record(line, m, time.time())])
            self.sent += 1
        self.done.set()


def _first_value(lines: list[TraceLine], key: str):
    return next((line.m[key] for line in lines if key in line.m), None)


def _last_value(lines: list[TraceLine], key: str):
    return next((line.m[key] for line in reversed(lines) if key in line.m), None)
