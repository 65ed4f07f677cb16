"""Simulated faults through the wire and ingest, for the health tests."""

from __future__ import annotations

import itertools
import time

from agent import protocol
from agent.backends.sim import SimGpu, SimHost, SimSource
from monitoring import frames, ingest

BOOT = "fa" * 16
_seqs = itertools.count(1)


def sim_of(gpu, fault=None) -> SimSource:
    """A one-GPU sim host speaking for the console's ``gpu`` (an instances.Gpu)."""
    sim_gpu = SimGpu({"uuid": gpu.uuid, "index": gpu.index}, seed=1)
    if fault:
        sim_gpu.set_fault(fault)
    return SimSource([SimHost(gpu.host.name, [sim_gpu])], interval=1.0, slow_interval=1.0)


def push(gpu, records: list[dict]) -> None:
    """``records`` as the agent sends them: cleaned, encoded, decoded by the server, stored."""
    bodies = [b for b in (protocol.encode_record(r, next(_seqs)) for r in records) if b]
    batch = frames.read(protocol.samples_frame(BOOT, bodies), now=time.time())
    ingest.store(link=ingest.Link(gpu.host_id, gpu.host.name), batches=[batch])


def tick(gpu, sim: SimSource, now: float | None = None) -> list[dict]:
    records = sim.tick(now or time.time())[gpu.host.name]
    push(gpu, records)
    return records
