"""The live fan-out sends a reading only to the groups somebody watches: most host
groups have no socket, and with Redis each send costs round trips all the same."""

import asyncio
import secrets

import pytest
from channels.layers import InMemoryChannelLayer
from django.conf import settings

from agent.protocol import NO_METRICS, LiveError, LiveReading
from console import live
from monitoring import fanout
from monitoring.readings import Live


def entry(uuid, host_id, team=None):
    return Live(LiveReading(uuid, "h", 0, None, team, "t", NO_METRICS, False), t=1.0, host_id=host_id)


class Recording:
    """A layer's group_send, recorded."""

    def __init__(self, layer, monkeypatch):
        self.groups = []
        real = layer.group_send

        async def group_send(group, message):
            self.groups.append(group)
            await real(group, message)

        monkeypatch.setattr(layer, "group_send", group_send)
        monkeypatch.setattr("console.live.get_channel_layer", lambda: layer)


def redis_layer():
    from gpuconsole.channel_layer import RedisChannelLayer

    config = {**settings.CHANNEL_LAYERS["default"]["CONFIG"], "prefix": f"test-{secrets.token_hex(4)}"}
    return RedisChannelLayer(**config)



@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_only_groups_with_a_member_are_sent_to(kind, monkeypatch):
    if kind == "redis" and not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (a real Redis)")
    layer = InMemoryChannelLayer() if kind == "memory" else redis_layer()
    sent = Recording(layer, monkeypatch)
    fleet_watcher, team_watcher = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("fleet", fleet_watcher)
    await layer.group_add("team.7", team_watcher)
    try:
        coalescer = fanout.Coalescer(0.05)
        coalescer.offer({"a": entry("a", 1, team=7), "b": entry("b", 2), "c": entry("c", 3, team=8)})
        await asyncio.sleep(fanout.QUIET_S + 0.1)
        assert sorted(sent.groups) == ["fleet", "team.7"]  # not host.1-3, nor team.8
        assert coalescer.sent == 6  # what it had for every group, sent or not
        fleet = await asyncio.wait_for(layer.receive(fleet_watcher), 2)
        assert [uuid for uuid, _, _ in fanout.unpack(fleet["readings"])] == ["a", "b", "c"]
        team = await asyncio.wait_for(layer.receive(team_watcher), 2)
        assert [uuid for uuid, _, _ in fanout.unpack(team["readings"])] == ["a"]

        # A socket that leaves takes its group out; one that joins brings it in.
        await layer.group_discard("team.7", team_watcher)
        await layer.group_add("host.3", team_watcher)
        assert await live.watched(layer, ["fleet", "team.7", "host.3", "host.1"]) == {"fleet", "host.3"}
    finally:
        if kind == "redis":
            await layer.flush()
            await layer.close_pools()


async def test_a_layer_that_cannot_tell_gets_every_group(monkeypatch):
    calls = []

    class Other:
        async def group_send(self, group, message):
            calls.append(group)

    monkeypatch.setattr("console.live.get_channel_layer", lambda: Other())
    await live.send_each([("fleet", {}), ("host.1", {})], watched_only=True)
    assert calls == ["fleet", "host.1"]


async def test_other_publishers_still_send_to_every_group(monkeypatch):
    layer = InMemoryChannelLayer()
    sent = Recording(layer, monkeypatch)
    await live.send_each([("team.1", live.message("error", LiveError("x"))), ("host.2", live.message("error", LiveError("x")))])
    assert sent.groups == ["team.1", "host.2"]
