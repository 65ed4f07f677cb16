"""Live GPU updates: the first reading goes out at once, then one event per interval."""

import asyncio
import json
import time

import pytest

from agent.protocol import NO_METRICS, LiveReading
from monitoring import fanout, readings


def entry(uuid, t, *, team=None, instance=None, stale=False):
    return readings.Live(LiveReading(uuid, "h", 0, instance, team, str(t), NO_METRICS, stale), t=t, host_id=1)


@pytest.fixture
def sent(monkeypatch):
    events = []

    async def fake_send_each(sends, **_):
        for group, message in sends:
            shown = [json.loads(text) for _, _, text in fanout.unpack(message["readings"])]
            events.append((asyncio.get_running_loop().time(), group, [float(g["t"]) for g in shown]))

    monkeypatch.setattr(fanout, "send_each", fake_send_each)
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


async def test_a_burst_of_writes_goes_out_in_one_event(sent):
    # Agents that sample in step: the first write ends, others are still under way.
    c = fanout.Coalescer(0.5)
    start = asyncio.get_running_loop().time()
    for _ in range(3):
        c.writing()
    c.written({"a": entry("a", 1.0)})
    await asyncio.sleep(0.02)
    assert sent == []  # the leading edge waits for the writes under way
    c.written({"b": entry("b", 1.0)})
    c.written({"c": entry("c", 1.0)})
    await asyncio.sleep(0.02)
    fleet = [(when, ts) for when, group, ts in sent if group == "fleet"]
    assert [ts for _, ts in fleet] == [[1.0, 1.0, 1.0]]
    assert fleet[0][0] - start < 0.2


async def test_a_slow_write_holds_the_leading_edge_at_most_one_interval(sent):
    c = fanout.Coalescer(0.1)
    start = asyncio.get_running_loop().time()
    c.writing()
    c.writing()
    c.written({"a": entry("a", 1.0)})  # the other write never ends
    await asyncio.sleep(0.2)
    times = [when for when, group, _ in sent if group == "fleet"]
    assert len(times) == 1 and 0.09 <= times[0] - start < 0.18


async def test_a_failed_write_counts_as_ended(sent):
    c = fanout.Coalescer(0.5)
    c.writing()
    c.writing()
    c.written({})  # failed: no readings
    c.written({"a": entry("a", 1.0)})
    await asyncio.sleep(fanout.QUIET_S + 0.02)
    assert [ts for _, group, ts in sent if group == "fleet"] == [[1.0]]


async def test_each_group_gets_one_message_per_flush(monkeypatch):
    calls = []

    class Layer:
        async def group_send(self, group, message):
            calls.append((group, message))

    monkeypatch.setattr("console.live.get_channel_layer", lambda: Layer())
    c = fanout.Coalescer(0.2)
    c.offer({"a": entry("a", 1.0), "b": entry("b", 2.0, team=7)})
    await asyncio.sleep(0.02)
    groups = [group for group, _ in calls]
    assert sorted(groups) == ["fleet", "host.1", "team.7"]  # one group_send per group per flush
    for _, message in calls:
        assert set(message) == {"type", "readings"} and message["type"] == "live.gpus"
    by_group = {group: fanout.unpack(message["readings"]) for group, message in calls}
    assert [uuid for uuid, _, _ in by_group["fleet"]] == ["a", "b"]
    assert [uuid for uuid, _, _ in by_group["team.7"]] == ["b"]
    assert by_group["fleet"][1][1] == (2.0, False)  # the order a socket merges by
    assert set(json.loads(by_group["fleet"][0][2])) == set(readings.PUBLIC_KEYS)


async def test_a_reading_is_serialised_once_however_many_groups_it_goes_to(monkeypatch):
    calls = []
    monkeypatch.setattr(fanout, "pack", lambda entry: calls.append(entry.reading.uuid) or f"1.0\x1f0\x1f{entry.reading.uuid}\x1f{{}}")
    fanout.sends([entry("a", 1.0, team=7, instance=3)])
    assert calls == ["a"]  # fleet, host, team and instance share the text


def test_a_message_of_an_earlier_release_is_read_too():
    # Workers of the previous release sent readings as dicts; a socket still merges them.
    public = {"uuid": "a", "host": "h", "index": 0, "instance": None, "team": None, "t": "2.0", "m": {},
              "stale": True}
    old = {"type": "live.gpus", "gpus": [{**public, "_host_id": 1, "_t": 2.0}]}
    [(uuid, key, text)] = fanout.unpack(fanout.readings_of(old))
    assert (uuid, key) == ("a", (2.0, True))
    assert text == fanout.unpack(fanout.pack(entry("a", 2.0, stale=True)))[0][2]
    assert json.loads(text) == public


async def test_a_burst_read_over_tens_of_milliseconds_goes_out_in_one_event(sent):
    # The server reads a lockstep burst frame by frame: each is attributed before the
    # next arrives, so nothing is "under way" between them; the gaps are short.
    c = fanout.Coalescer(0.5)
    start = asyncio.get_running_loop().time()
    for name in "abcdef":
        c.writing()
        c.written({name: entry(name, 1.0)})
        await asyncio.sleep(fanout.QUIET_S / 3)
    await asyncio.sleep(2 * fanout.QUIET_S)
    fleet = [(when, ts) for when, group, ts in sent if group == "fleet"]
    assert [ts for _, ts in fleet] == [[1.0] * 6]
    assert fleet[0][0] - start < 0.2  # when the burst ended, not an interval later


async def test_a_stall_of_the_event_loop_is_not_taken_for_the_end_of_a_burst(sent):
    # A collection or another thread holding the GIL stops the loop; a frame that came
    # meanwhile reaches the coalescer a few loop turns after its own timer has fired
    # (the socket is read, then daphne, then the consumer pass it on).
    loop = asyncio.get_running_loop()
    c = fanout.Coalescer(0.5)
    c.writing()
    c.written({"a": entry("a", 1.0)})
    await asyncio.sleep(fanout.QUIET_S / 6)  # the flush waits for the quiet spell

    def arrive(turns):
        if turns:
            loop.call_soon(arrive, turns - 1)
        else:
            c.writing()
            c.written({"b": entry("b", 1.0)})

    loop.call_later(fanout.QUIET_S / 2, arrive, 3)
    time.sleep(3 * fanout.QUIET_S)  # the stall: both timers are due when it ends
    await asyncio.sleep(0.3)
    assert [ts for _, group, ts in sent if group == "fleet"] == [[1.0, 1.0]]


async def test_a_reading_offered_while_a_flush_is_sending_goes_in_the_next_one(monkeypatch):
    """With Redis a flush awaits its sends; a reading offered meanwhile must not wait
    for the next offer (a second later, when a newer reading would replace it)."""
    events = []

    async def slow_send_each(sends, **_):
        for group, message in sends:
            if group == "fleet":
                events.append([float(json.loads(text)["t"]) for _, _, text in fanout.unpack(message["readings"])])
        await asyncio.sleep(0.05)

    monkeypatch.setattr(fanout, "send_each", slow_send_each)
    c = fanout.Coalescer(0.1)
    c.offer({"a": entry("a", 1.0)})
    await asyncio.sleep(0.02)  # the first flush is sending
    c.offer({"b": entry("b", 1.0)})
    await asyncio.sleep(0.3)
    assert events == [[1.0], [1.0]]
