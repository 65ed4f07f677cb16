import asyncio

from agent import runner
from agent.backends.replay import ReplaySource
from agent.spool import Spool


async def run_once(source, link, timeout=15):
    return await asyncio.wait_for(runner.run(source, {source.host: link}, once=True), timeout)


async def test_it_delivers_every_record_once_in_order(
    server, make_link, replay, small_trace, tmp_path
):
    source = replay(small_trace)
    link = make_link(server.url, Spool(tmp_path), source)
    assert await run_once(source, link) == 0
    assert [seq for _, seq in server.received] == list(range(1, 21))
    assert len(link.spool) == 0


async def test_it_says_hello_first_with_the_gpus(server, make_link, replay, small_trace, tmp_path):
    source = replay(small_trace)
    await run_once(source, make_link(server.url, Spool(tmp_path), source))
    hello = server.hellos[0]
    assert hello["type"] == "hello" and hello["v"] == 1 and hello["backend"] == "replay"
    assert hello["gpus"][0]["uuid"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert len(hello["boot_id"]) == 32


async def test_the_server_stores_what_the_trace_recorded(server, make_link, trace, tmp_path):
    source = ReplaySource(trace, host="h", speed=200, once=True)
    await run_once(source, make_link(server.url, Spool(tmp_path), source))
    stored = [server.stored[key] for key in sorted(server.stored)]
    assert [r["m"] for r in stored] == [line.m for line in trace.lines]
    assert all(r["gpu"] == trace.static["uuid"] and "phase" not in r["m"] for r in stored)


async def test_nothing_is_lost_or_repeated_when_the_server_goes_away(
    server_class, make_link, trace, tmp_path
):
    first = await server_class().start()
    first.go_away_after = 100
    source = ReplaySource(trace, host="h", speed=50, once=True)
    link = make_link(first.url, Spool(tmp_path), source)
    agent = asyncio.create_task(run_once(source, link, timeout=30))
    await asyncio.wait_for(first.gone_away.wait(), 10)
    await first.stop()
    await asyncio.sleep(0.6)  # the agent keeps sampling into its spool meanwhile
    second = await server_class(port=first.port).start()
    assert await agent == 0
    await second.stop()
    received = [seq for _, seq in first.received + second.received]
    assert received == list(range(1, 371))
    assert first.received and second.received


async def test_records_spooled_before_a_restart_go_first(
    server_class, make_link, replay, small_trace, tmp_path
):
    offline = server_class()  # never started: nothing listens on its port
    source = replay(small_trace)
    spool = Spool(tmp_path)
    before = make_link(offline.url, spool, source)
    try:
        await asyncio.wait_for(runner.run(source, {source.host: before}), 1.0)
    except TimeoutError:
        pass
    assert len(spool) == 20
    spool.close()
    async with server_class(port=offline.port) as server:
        source = replay(small_trace)
        after = make_link(server.url, Spool(tmp_path), source)
        assert await run_once(source, after) == 0
    boots = [boot for boot, _ in server.received]
    assert boots == [before.boot_id] * 20 + [after.boot_id] * 20


async def test_it_closes_normally_when_done(server, make_link, replay, small_trace, tmp_path):
    source = replay(small_trace)
    await run_once(source, make_link(server.url, Spool(tmp_path), source))
    await asyncio.sleep(0.1)
    assert server.close_codes == [1000]


async def test_the_hello_names_the_driver_of_the_trace(server, make_link, trace, tmp_path):
    source = ReplaySource(trace, host="h", speed=1000, once=True)
    await run_once(source, make_link(server.url, Spool(tmp_path), source))
    assert server.hellos[0]["driver"] == "580.159.04"


async def test_new_gpus_bring_a_new_hello_on_the_same_boot(
    server, make_link, replay, small_trace, tmp_path
):
    source = replay(small_trace, speed=5)  # about 0.8 s of samples
    link = make_link(server.url, Spool(tmp_path), source)
    agent = asyncio.create_task(run_once(source, link))
    while not server.hellos:
        await asyncio.sleep(0.01)
    changed = [dict(link.gpus[0], name="NVIDIA H200 NVL")]
    source.on_inventory(source.host, changed)
    assert await agent == 0
    assert [h["gpus"][0]["name"] for h in server.hellos] == ["NVIDIA H200", "NVIDIA H200 NVL"]
    assert len({h["boot_id"] for h in server.hellos}) == 1
    assert sorted(seq for _, seq in server.received) == list(range(1, 21))
