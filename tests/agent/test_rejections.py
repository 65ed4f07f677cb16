import asyncio

from agent import runner
from agent.cli import main
from agent.spool import Spool


async def run_once(source, link):
    return await asyncio.wait_for(runner.run(source, {source.host: link}, once=True), 15)


def reject_first_frame(code: int, slug: str, rejected: list):
    def verdict(frame):
        if rejected:
            return None
        rejected.extend(r["seq"] for r in frame["records"])
        return (code, slug)

    return verdict


async def test_a_batch_rejected_as_bad_is_dropped_and_the_rest_delivered(
    server, make_link, replay, small_trace, tmp_path
):
    rejected = []
    server.reject = reject_first_frame(4400, "bad_frame", rejected)
    source = replay(small_trace)
    link = make_link(server.url, Spool(tmp_path), source)
    assert await run_once(source, link) == 0
    delivered = [seq for _, seq in server.received]
    assert rejected and sorted(delivered + rejected) == list(range(1, 21))
    assert len(link.spool) == 0


async def test_a_batch_rejected_for_its_seq_is_dropped_too(
    server, make_link, replay, small_trace, tmp_path
):
    rejected = []
    server.reject = reject_first_frame(4409, "seq_not_increasing", rejected)
    source = replay(small_trace)
    assert await run_once(source, make_link(server.url, Spool(tmp_path), source)) == 0
    assert not set(rejected) & {seq for _, seq in server.received}


async def test_a_refused_token_stops_the_agent(server, make_link, replay, small_trace, tmp_path):
    source = replay(small_trace)
    link = make_link(server.url, Spool(tmp_path), source, token="revoked")
    assert await run_once(source, link) == 2
    assert len(link.spool) == source.sent  # kept for when a good token comes


def test_the_cli_exits_with_one_line_on_a_refused_token(
    threaded_server, small_trace, tmp_path, capsys
):
    server = threaded_server()
    code = main(["--server", server.url, "--token", "revoked", "--backend", "replay",
                 "--trace", str(small_trace), "--speed", "50", "--once",
                 "--spool-dir", str(tmp_path)])  # fmt: skip
    errors = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert code == 2
    assert errors == [
        "gpuconsole-agent: error: the server refused this agent "
        "(4401 bad or revoked token: the token is not valid)"
    ]


async def test_an_http_401_at_the_upgrade_counts_as_a_refused_token(
    server, make_link, replay, small_trace, tmp_path
):
    server.refuse_http = 401
    source = replay(small_trace)
    assert await run_once(source, make_link(server.url, Spool(tmp_path), source)) == 2


async def test_retry_auth_keeps_trying_until_the_token_is_accepted(
    server, make_link, replay, small_trace, tmp_path
):
    server.tokens = {"new"}
    source = replay(small_trace)
    link = make_link(server.url, Spool(tmp_path), source, retry_auth=True)
    agent = asyncio.create_task(run_once(source, link))
    await asyncio.sleep(0.5)
    assert not agent.done()
    server.tokens.add("host-token-1")
    assert await agent == 0 and len(server.stored) == 20
