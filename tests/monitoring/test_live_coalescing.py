"""Live GPU updates: the first reading goes out at once, then one event per interval."""

import asyncio

import pytest

from monitoring import fanout


def entry(uuid, t):
    return {"uuid": uuid, "host": "h", "index": 0, "instance": None, "team": None, "t": t, "m": {}, "stale": False,
            "_host_id": 1, "_t": t}


@pytest.fixture
def sent(monkeypatch):
    events = []

    async def fake_publish(groups, event, data):
        events.append((asyncio.get_running_loop().time(), groups[0], [g["t"] for g in data["gpus"]]))

    monkeypatch.setattr(fanout, "apublish", fake_publish)
    return events


async def test_a_reading_after_a_quiet_spell_goes_out_at_once(sent):
    c = fanout.Coalescer(0.2)
    start = asyncio.get_running_loop().time()
    c.offer({"a": entry("a", 1.0)})
    await asyncio.sleep(0.05)
    assert sent and sent[0][0] - start < 0.05


async def test_readings_within_the_interval_are_coalesced_to_the_newest(sent):
    c = fanout.Coalescer(0.2)
    c.offer({"a": entry("a", 1.0)})
    await asyncio.sleep(0.01)
    for t in (2.0, 3.0, 4.0):
        c.offer({"a": entry("a", t)})
    await asyncio.sleep(0.3)
    fleet = [ts for _, group, ts in sent if group == "fleet"]
    assert fleet == [[1.0], [4.0]]
    times = [when for when, group, _ in sent if group == "fleet"]
    assert times[1] - times[0] >= 0.19
