"""Frames that arrive one by one (agents each sampling on their own schedule) are
attributed and stored several to a call: the first after a quiet spell at once, the
next no sooner than the gather interval after it."""

import asyncio
from types import SimpleNamespace

from monitoring import consumers, fanout


class Link:
    """Stands in for an ingest.Link (the flusher only keys and weak-references it)."""


async def run_frames(
    settings, monkeypatch, gather_ms: int, read_gather_ms: int, spacing_s: float, count: int
):
    settings.INGEST_GATHER_S, settings.INGEST_READ_GATHER_S = (
        gather_ms / 1000,
        read_gather_ms / 1000,
    )
    reads, writes = [], []

    def prepare(items):
        reads.append(len(items))
        return [
            SimpleNamespace(link=link, latest={}, frames=len(batches)) for link, batches in items
        ]

    def write(prepared):
        writes.append(len(prepared))
        return [SimpleNamespace(acks=[("boot", n) for n in range(p.frames)]) for p in prepared]

    monkeypatch.setattr(consumers.ingest, "prepare", prepare)
    monkeypatch.setattr(consumers.ingest, "write", write)
    monkeypatch.setattr(fanout, "writing", lambda: None)
    monkeypatch.setattr(consumers.Flusher, "_published", staticmethod(lambda count, latest: None))
    flusher = consumers.Flusher(4)
    futures = []
    for _ in range(count):
        futures.append(flusher.submit(Link(), "frame"))
        await asyncio.sleep(spacing_s)
    acks = await asyncio.wait_for(asyncio.gather(*futures), 10)
    return reads, writes, acks


async def test_frames_one_by_one_are_stored_together(settings, monkeypatch):
    reads, writes, acks = await run_frames(settings, monkeypatch, 300, 150, 0.03, 4)
    # the first at once; the three that came within the intervals after it, together
    assert reads == [1, 3] and writes == [1, 3]
    assert acks == [("boot", 0)] * 4  # every frame acknowledged after its write


async def test_with_no_gather_each_frame_is_stored_on_its_own(settings, monkeypatch):
    reads, writes, _ = await run_frames(settings, monkeypatch, 0, 0, 0.03, 3)
    assert reads == [1, 1, 1] and writes == [1, 1, 1]


async def test_a_burst_does_not_wait_out_the_gather(settings, monkeypatch):
    # a whole window of frames at once (many hosts in step, or an agent sending what it
    # spooled): attributed and written without waiting out the minute (run_frames waits 10 s)
    reads, writes, acks = await run_frames(
        settings, monkeypatch, 60_000, 60_000, 0, 1 + consumers.GATHER_FRAMES
    )
    assert sum(reads) == sum(writes) == len(acks) == 1 + consumers.GATHER_FRAMES
