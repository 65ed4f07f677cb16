"""Telemetry sources. Each one knows its hosts and pushes records to an emit callback.

A record is a dict without ``seq`` (the outbox numbers them): either
``{"t", "gpu", "slice"?, "m", "procs"?}`` or ``{"t", "gpu", "slice"?, "event"}``.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Emit = Callable[[str, list[dict]], None]


@dataclass
class HostInfo:
    """One host as the server sees it: its name, its GPUs (hello entries), maybe its token."""

    host: str
    gpus: list[dict]
    token: str | None = None
    driver: str | None = None


class Source(abc.ABC):
    """Base for backends: a stop flag, a done flag, and the threads they started."""

    name = "base"

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.done = threading.Event()
        self.threads: list[threading.Thread] = []
        # Called with (host, gpus) when a host's GPUs change (a MIG reconfiguration).
        self.on_inventory: Callable[[str, list[dict]], None] | None = None

    @abc.abstractmethod
    def hosts(self) -> list[HostInfo]:
        """The hosts this source speaks for, with their GPUs (for the hello)."""

    @abc.abstractmethod
    def start(self, emit: Emit, loop=None) -> None:
        """Start sampling, handing records to ``emit``: on the source's own threads, or,
        for a source that can, partly on ``loop`` (the agent's event loop) when given."""

    def spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=2.0)


def run_every(stop: threading.Event, interval: float, step: Callable[[], None]) -> None:
    """Call step every interval seconds on a fixed schedule until stop is set.

    The schedule is absolute, so the period does not drift by the step's own cost;
    when a step overruns, the missed ticks are skipped rather than bunched up.
    """
    due = time.monotonic()
    while not stop.is_set():
        step()
        due += interval
        delay = due - time.monotonic()
        if delay < 0:
            due = time.monotonic()
            delay = 0.0
        if stop.wait(delay):
            return
