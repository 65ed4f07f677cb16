import asyncio
import json

from agent import diagnostics
from agent.spool import Spool


async def test_a_diagnostics_frame_is_answered_off_the_event_loop(server, make_link, replay, small_trace, tmp_path,
                                                                   monkeypatch):
    asked = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def answer(frame, *, server, token):
        asked.append((frame.id, server, token))
        loop.call_soon_threadsafe(done.set)

    monkeypatch.setattr(diagnostics, "answer", answer)
    source = replay(small_trace)
    link = make_link(server.url, Spool(tmp_path), source)
    frame = {"type": "diagnostics", "id": 7, "key": "k", "upload": "/api/v1/agent/diagnostics/7/"}
    assert await link._take(None, json.dumps(frame)) is None
    await asyncio.wait_for(done.wait(), 5)
    assert asked == [(7, link.server, link.token)]


def test_the_agent_keeps_its_log_tail_for_a_bundle(server, make_link, replay, small_trace, tmp_path):
    import logging

    make_link(server.url, Spool(tmp_path), replay(small_trace))
    logging.getLogger("gpuconsole.agent").warning("spool almost full")
    assert any("spool almost full" in line for line in diagnostics.LOG_TAIL.lines)
