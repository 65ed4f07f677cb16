"""Readings reach the live fan-out once their frame is attributed, without waiting
for any write, earlier frames' included; a connection whose write failed writes
nothing more, so no later frame is stored ahead of the one that failed."""

import asyncio
import threading
import time

import pytest
from telemetry_wire import Agent, record, samples

from monitoring import fanout, ingest
from monitoring.models import AgentSession, Sample

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def offered(monkeypatch):
    seen: list[tuple[str, float]] = []
    monkeypatch.setattr(fanout, "offer", lambda latest: seen.extend((u, e.t) for u, e in latest.items()))
    return seen


@pytest.fixture
def held_write(monkeypatch):
    """Writes wait until ``release`` is set; ``fail`` makes the next write raise."""
    real = ingest.write
    state = {"release": threading.Event(), "fail": False, "started": 0}

    def write(prepared):
        state["started"] += 1
        assert state["release"].wait(20)
        if state.pop("fail", False):
            raise RuntimeError("the database went away")
        return real(prepared)

    monkeypatch.setattr(ingest, "write", write)
    yield state
    state["release"].set()


async def until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


async def test_readings_go_out_while_an_earlier_write_is_under_way(tokens, offered, held_write):
    now = time.time()
    async with Agent(tokens["h100-a"]) as a, Agent(tokens["h100-b"]) as b:
        assert (await a.hello(host="h100-a"))["type"] == (await b.hello(host="h100-b"))["type"] == "welcome"
        await a.send(samples([record(1, gpu="GPU-h100-a-0", t=now)]))
        await until(lambda: held_write["started"] == 1)  # the first write is under way, and holds
        await b.send(samples([record(1, gpu="GPU-h100-b-0", t=now)]))
        await a.send(samples([record(2, gpu="GPU-h100-a-0", t=now + 1)]))
        await until(lambda: len(offered) == 3)
        assert sorted(offered) == [("GPU-h100-a-0", now), ("GPU-h100-a-0", now + 1), ("GPU-h100-b-0", now)]
        assert await Sample.objects.acount() == 0  # none of them stored yet
        held_write["release"].set()
        assert [(await a.recv())["seq"], (await a.recv())["seq"], (await b.recv())["seq"]] == [1, 2, 1]
    assert await Sample.objects.acount() == 3


async def test_readings_of_a_device_the_host_does_not_have_are_never_published(tokens, offered, held_write):
    held_write["release"].set()
    async with Agent(tokens["h100-a"]) as a:
        await a.hello(host="h100-a")
        await a.send(samples([record(1, gpu="GPU-elsewhere-0"), record(2, gpu="GPU-h100-a-3")]))
        assert (await a.recv())["seq"] == 2
    assert [uuid for uuid, _ in offered] == ["GPU-h100-a-3"]


async def test_after_a_failed_write_the_connection_writes_nothing_more(tokens, offered, held_write):
    held_write["fail"] = True
    now = time.time()
    async with Agent(tokens["h100-a"]) as a:
        await a.hello(host="h100-a")
        await a.send(samples([record(1, t=now)]))
        await until(lambda: held_write["started"] == 1)
        await a.send(samples([record(2, t=now + 1)]))  # attributed while the first write holds
        await until(lambda: len(offered) == 2)
        held_write["release"].set()
        assert (await a.recv())["code"] == "server_error"
        assert await a.closed() == 4500
    assert held_write["started"] == 1  # the second frame was never written ahead of the first
    assert await Sample.objects.acount() == 0
    assert not await AgentSession.objects.filter(last_seq__gt=0).aexists()
