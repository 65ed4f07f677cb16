"""A burst of channel-layer commands (every agent of a fleet reconnecting at once) waits
for a free Redis connection instead of failing with "Too many connections"."""

import asyncio

import pytest
import redis.exceptions
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer as Plain
from django.conf import settings

from gpuconsole.channel_layer import RedisChannelLayer

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real Redis)")
BURST = 3 * settings.REDIS_MAX_CONNECTIONS


async def burst(layer) -> None:
    channel = await layer.new_channel()
    try:
        await asyncio.gather(*(layer.group_add(f"burst.{i}", channel) for i in range(BURST)))
        await asyncio.gather(*(layer.group_send(f"burst.{i}", {"type": "live.event", "text": str(i)})
                               for i in range(BURST)))
        got = [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(BURST)]
        assert sorted(int(m["text"]) for m in got) == list(range(BURST))
    finally:
        await asyncio.gather(*(layer.group_discard(f"burst.{i}", channel) for i in range(BURST)),
                             return_exceptions=True)


async def test_the_configured_layer_waits_for_a_connection():
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    await burst(layer)
    pool = layer.connection(0).connection_pool
    assert pool.max_connections == settings.REDIS_MAX_CONNECTIONS  # bounded all the same
    await layer.close_pools()


async def test_channels_redis_own_pool_refuses_the_burst():
    # What the layer guards against: redis-py's default pool refuses the command past
    # its limit at once.
    plain = Plain(**settings.CHANNEL_LAYERS["default"]["CONFIG"])
    with pytest.raises(redis.exceptions.MaxConnectionsError):
        await burst(plain)
    await plain.close_pools()
