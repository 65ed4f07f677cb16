"""Runs a source and its hosts' links together until stopped, refused, or (--once) drained."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading

from .backends import Source
from .process import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED, trim_memory
from .uplink import FatalError, HostLink

__all__ = ["run", "EXIT_OK", "EXIT_FAILED", "EXIT_REFUSED", "EXIT_INTERRUPTED"]

log = logging.getLogger("gpuconsole.agent")

DRAIN_POLL_S = 0.05
# The first connection and ticks leave freed memory in the C heap: handed back once.
TRIM_AFTER_S = 10.0


async def run(source: Source, links: dict[str, HostLink], *, once: bool = False) -> int:
    """Sample with source, send through links; returns the process exit code."""
    loop = asyncio.get_running_loop()
    for link in links.values():
        link.bind(loop)

    def emit(host: str, records: list[dict]) -> None:
        link = links.get(host)
        if link is not None and records:
            link.outbox.put(records)

    def inventory(host: str, gpus: list[dict]) -> None:
        link = links.get(host)
        if link is not None:
            loop.call_soon_threadsafe(link.update_gpus, gpus)

    source.on_inventory = inventory
    stopped = asyncio.Event()
    interrupted = []
    _install_signals(loop, stopped, interrupted)
    source.start(emit, loop)
    trim = loop.call_later(TRIM_AFTER_S, trim_memory)
    link_tasks = [asyncio.create_task(link.run(), name=f"link {h}") for h, link in links.items()]
    watchers = [asyncio.create_task(stopped.wait(), name="signal")]
    if once:
        watchers.append(asyncio.create_task(_drained(source, links), name="drained"))
    try:
        done, _ = await asyncio.wait([*link_tasks, *watchers], return_when=asyncio.FIRST_COMPLETED)
        return _exit_code(done, link_tasks, interrupted)
    finally:
        trim.cancel()
        source.stop_event.set()  # here, on the loop: no tick of a source on the loop is under way
        await asyncio.to_thread(source.stop)
        for task in [*link_tasks, *watchers]:
            task.cancel()
        await asyncio.gather(*link_tasks, *watchers, return_exceptions=True)
        for link in links.values():
            link.flush_now()
        _remove_signals(loop)


async def _drained(source: Source, links: dict[str, HostLink]) -> None:
    while not (source.done.is_set() and all(link.drained for link in links.values())):
        await asyncio.sleep(DRAIN_POLL_S)


def _exit_code(done: set, link_tasks: list, interrupted: list) -> int:
    for task in done:
        if task in link_tasks and not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if isinstance(exc, FatalError):
                log.error(str(exc))
                return EXIT_REFUSED
            log.error("unexpected failure: %r", exc)
            return EXIT_FAILED
    if interrupted and interrupted[0] == signal.SIGINT:
        return EXIT_INTERRUPTED
    return EXIT_OK


def _install_signals(loop, stopped: asyncio.Event, interrupted: list) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):

        def handler(sig=sig):
            interrupted.append(sig)
            stopped.set()

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, handler)


def _remove_signals(loop) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(sig)
