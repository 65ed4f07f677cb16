"""On a healthy link records go from memory to the server without touching the disk;
what the server does not acknowledge in time (slow, or no connection) is spooled, and
order is kept across both."""

import asyncio

from agent import runner, uplink
from agent.spool import Spool


async def run_once(source, link, timeout=15):
    return await asyncio.wait_for(runner.run(source, {source.host: link}, once=True), timeout)


def counting_appends(spool: Spool) -> list[int]:
    written = []
    real = spool.append

    def append(boot_id, rows):
        written.extend(seq for seq, _ in rows)
        return real(boot_id, rows)

    spool.append = append
    return written


async def test_acknowledged_records_never_reach_the_spool(server, make_link, replay, small_trace, tmp_path):
    source = replay(small_trace, speed=5)  # a record every 40 ms, 0.8 s in all
    spool = Spool(tmp_path)
    written = counting_appends(spool)
    link = make_link(server.url, spool, source)
    assert await run_once(source, link) == 0
    assert [seq for _, seq in server.received] == list(range(1, 21))
    assert written == [] and len(spool) == 0 and link.drained
    assert not (tmp_path / "spool.sqlite3").exists()  # SQLite was never even opened


async def test_records_the_server_sits_on_are_spooled_then_sent_in_order(
    server, make_link, replay, small_trace, tmp_path, monkeypatch
):
    monkeypatch.setattr(uplink, "SPOOL_AFTER_S", 0.05)
    slow = asyncio.Event()
    real_samples = server._samples

    async def late_ack(ws, frame):
        if not slow.is_set():  # the first frame waits long enough for the spool to take it
            slow.set()
            await asyncio.sleep(0.3)
        await real_samples(ws, frame)

    server._samples = late_ack
    source = replay(small_trace)
    spool = Spool(tmp_path)
    written = counting_appends(spool)
    link = make_link(server.url, spool, source)
    assert await run_once(source, link) == 0
    assert written, "records left unacknowledged past SPOOL_AFTER_S were not spooled"
    assert [seq for _, seq in server.received] == list(range(1, 21))
    assert len(spool) == 0


async def test_held_records_go_to_the_spool_when_the_connection_stays_down(
    server_class, make_link, replay, small_trace, tmp_path, monkeypatch
):
    monkeypatch.setattr(uplink, "SPOOL_AFTER_S", 0.05)
    first = await server_class().start()
    first.go_away_after = 5
    source = replay(small_trace, speed=20)
    spool = Spool(tmp_path)
    written = counting_appends(spool)
    link = make_link(first.url, spool, source)
    agent = asyncio.create_task(run_once(source, link, timeout=30))
    await asyncio.wait_for(first.gone_away.wait(), 10)
    await first.stop()
    await asyncio.sleep(0.4)
    assert written and link.in_memory == 0  # nothing waits in memory while disconnected
    second = await server_class(port=first.port).start()
    assert await agent == 0
    await second.stop()
    stored = sorted(seq for _, seq in set(first.stored) | set(second.stored))
    assert stored == list(range(1, 21))
    assert [seq for _, seq in second.received] == sorted(seq for _, seq in second.received)
