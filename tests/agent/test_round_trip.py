import asyncio

from monitoring.agent import runner
from monitoring.agent.spool import Spool


async def test_it_delivers_every_record_once_in_order(
    server, make_link, replay, small_trace, tmp_path
):
    source = replay(small_trace)
    link = make_link(server.url, Spool(tmp_path / "spool"), source)
    code = await asyncio.wait_for(runner.run(source, {"test-host": link}, once=True), 10)
    assert code == 0
    assert [seq for _, seq in server.received] == list(range(1, 21))
    assert len(link.spool) == 0


async def test_it_sends_a_hello_describing_the_gpu(
    server, make_link, replay, small_trace, tmp_path
):
    source = replay(small_trace)
    link = make_link(server.url, Spool(tmp_path / "spool"), source)
    await asyncio.wait_for(runner.run(source, {"test-host": link}, once=True), 10)
    hello = server.hellos[0]
    assert hello["type"] == "hello" and hello["v"] == 1 and hello["backend"] == "replay"
    assert hello["gpus"][0]["uuid"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert len(hello["boot_id"]) == 32
