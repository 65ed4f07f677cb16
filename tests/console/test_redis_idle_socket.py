"""With Redis, a websocket's channel can wait for its next message longer than
channels-redis's 5 s blocking pop without the Redis client timing out (which daphne
turns into a 1011 close of an idle socket)."""

import asyncio

import pytest
import redis.exceptions
from channels_redis.core import RedisChannelLayer
from django.conf import settings

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real Redis)")

WAIT_S = RedisChannelLayer.brpop_timeout + 3  # past the pop and redis-py 8's 5 s default


def layer(**config) -> RedisChannelLayer:
    return RedisChannelLayer(**{**settings.CHANNEL_LAYERS["default"]["CONFIG"], **config})


async def test_it_waits_past_the_blocking_pop_and_still_delivers():
    configured = layer()
    channel = await configured.new_channel()
    with pytest.raises(TimeoutError):  # our own deadline, not the Redis client's
        await asyncio.wait_for(configured.receive(channel), WAIT_S)
    await configured.send(channel, {"type": "live.event", "text": "after the wait"})
    assert (await asyncio.wait_for(configured.receive(channel), 5))["text"] == "after the wait"
    await configured.flush()
    await configured.close_pools()


async def test_the_client_defaults_would_cut_it():
    # The same wait on a layer given only the URL, as before: the Redis client's read
    # timeout fires first. This is what the settings guard against.
    bare = layer(hosts=[settings.REDIS_URL])
    channel = await bare.new_channel()
    with pytest.raises(redis.exceptions.TimeoutError):
        await asyncio.wait_for(bare.receive(channel), WAIT_S)
    await bare.close_pools()


def test_the_read_timeout_outlasts_the_blocking_pop():
    assert settings.REDIS_SOCKET_TIMEOUT_S > RedisChannelLayer.brpop_timeout
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["socket_timeout"] == settings.REDIS_SOCKET_TIMEOUT_S
