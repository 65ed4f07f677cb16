"""Frames that arrive one by one (agents each sampling on their own schedule) are
attributed and stored several to a call: the first after a quiet spell at once, the
next no sooner than the gather interval after it; a burst, or the large frames of an
agent catching up, go at once."""

import asyncio
from types import SimpleNamespace

import pytest

from monitoring import consumers, fanout

# Storage is stood in for, but the flusher's threads may be ones an earlier test used,
# and look at their database connections' age as they always do (CONNECTION_CHECK_S).
pytestmark = pytest.mark.django_db


class Link:
    """Stands in for an ingest.Link (the flusher only keys and weak-references it)."""


def frame(readings: int = 8) -> SimpleNamespace:
    """Stands in for a decoded frame: one host's sample of 8 GPUs by default."""
    return SimpleNamespace(records=[None] * readings)


async def run_frames(settings, monkeypatch, gather_ms, read_gather_ms, spacing_s, frames):
    settings.INGEST_GATHER_S = gather_ms / 1000
    settings.INGEST_READ_GATHER_S = read_gather_ms / 1000
    reads, writes = [], []

    def prepare(items):
        reads.append(len(items))
        return [SimpleNamespace(link=link, latest={}, batches=batches) for link, batches in items]

    def write(prepared):
        writes.append(len(prepared))
        return [
            SimpleNamespace(acks=[("boot", n) for n in range(len(p.batches))]) for p in prepared
        ]

    monkeypatch.setattr(consumers.ingest, "prepare", prepare)
    monkeypatch.setattr(consumers.ingest, "write", write)
    monkeypatch.setattr(fanout, "writing", lambda: None)
    monkeypatch.setattr(consumers.Flusher, "_published", staticmethod(lambda count, latest: None))
    flusher = consumers.Flusher(4)
    futures = []
    for batch in frames:
        futures.append(flusher.submit(Link(), batch))
        await asyncio.sleep(spacing_s)
    acks = await asyncio.wait_for(asyncio.gather(*futures), 10)
    return reads, writes, acks


async def test_frames_one_by_one_are_stored_together(settings, monkeypatch):
    reads, writes, acks = await run_frames(
        settings, monkeypatch, 300, 150, 0.03, [frame() for _ in range(4)]
    )
    # the first at once; the three that came within the intervals after it, together
    assert reads == [1, 3] and writes == [1, 3]
    assert acks == [("boot", 0)] * 4  # every frame acknowledged after its write


async def test_with_no_gather_each_frame_is_stored_on_its_own(settings, monkeypatch):
    reads, writes, _ = await run_frames(
        settings, monkeypatch, 0, 0, 0.03, [frame() for _ in range(3)]
    )
    assert reads == [1, 1, 1] and writes == [1, 1, 1]


async def test_a_burst_does_not_wait_out_the_gather(settings, monkeypatch):
    # 64 readings at once (8 hosts of 8 GPUs in step): attributed and written without
    # waiting out the minute (run_frames waits 10 s)
    frames = [frame() for _ in range(1 + consumers.GATHER_RECORDS // 8)]
    reads, writes, acks = await run_frames(settings, monkeypatch, 60_000, 60_000, 0, frames)
    assert sum(reads) == sum(writes) == len(acks) == len(frames)


async def test_an_agent_catching_up_does_not_wait_out_the_gather(settings, monkeypatch):
    # an agent sends its next frame once the last is acknowledged; the frames of what it
    # spooled are large, and each goes at once
    frames = [frame(), frame(500), frame(500)]
    reads, writes, acks = await run_frames(settings, monkeypatch, 60_000, 60_000, 0.01, frames)
    assert reads == [1, 1, 1] and writes == [1, 1, 1] and len(acks) == 3
