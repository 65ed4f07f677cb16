"""An agent given a URL that is not the agent endpoint stops with one line saying so,
instead of retrying for ever."""

import asyncio

from agent import runner
from agent.cli import main
from agent.spool import Spool


async def run_once(source, link):
    return await asyncio.wait_for(runner.run(source, {source.host: link}, once=True), 15)


async def test_a_403_from_the_base_url_stops_the_agent(server, make_link, replay, small_trace, tmp_path):
    server.refuse_http = 403
    source = replay(small_trace)
    base = server.url.removesuffix("ws/agent/")
    assert await run_once(source, make_link(base, Spool(tmp_path), source, retry_auth=True)) == 2


async def test_a_404_stops_the_agent_even_on_the_agent_path(server, make_link, replay, small_trace, tmp_path):
    server.refuse_http = 404
    source = replay(small_trace)
    assert await run_once(source, make_link(server.url, Spool(tmp_path), source)) == 2


async def test_a_503_is_retried(server, make_link, replay, small_trace, tmp_path):
    server.refuse_http = 503
    source = replay(small_trace)
    agent = asyncio.create_task(run_once(source, make_link(server.url, Spool(tmp_path), source)))
    await asyncio.sleep(0.5)
    assert not agent.done()
    server.refuse_http = None
    assert await agent == 0


def test_the_cli_says_the_url_is_wrong_in_one_line(threaded_server, small_trace, tmp_path, capsys):
    server = threaded_server()
    server.refuse_http = 403
    base = server.url.removesuffix("ws/agent/")
    code = main(["--server", base, "--token", "host-token-1", "--backend", "replay",
                 "--trace", str(small_trace), "--speed", "50", "--once",
                 "--spool-dir", str(tmp_path)])  # fmt: skip
    errors = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert code == 2
    assert errors == [
        f"gpuconsole-agent: error: {base} is not the console's agent endpoint (HTTP 403); "
        "--server should end in /ws/agent/, e.g. wss://console.example/ws/agent/"
    ]
