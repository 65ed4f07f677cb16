"""Each test gets a channel layer of its own (tests/conftest.py): a layer kept from an
earlier test can hold an ``asyncio`` lock bound to that test's closed event loop."""

import asyncio
import contextlib

import pytest
from channels.layers import get_channel_layer

from tests.conftest import forget_channel_layers

REDIS_LAYER = {"default": {"BACKEND": "gpuconsole.channel_layer.RedisChannelLayer",
                           "CONFIG": {"hosts": ["redis://127.0.0.1:6379/15"]}}}  # no command reaches Redis


def clean_lock_key(layer) -> str:
    """The key of the lock every receive of this layer's process-specific channel takes."""
    return layer.prefix + f"specific.{layer.client_prefix}!"


async def end_a_loop_while_a_receive_waits(layer) -> None:
    key = clean_lock_key(layer)
    await layer.receive_clean_locks.acquire(key)  # a receive's cleaner still holds the lock
    waiting = asyncio.ensure_future(layer.receive_clean_locks.acquire(key))  # the next receive waits
    await asyncio.sleep(0)
    waiting.cancel()  # the test's loop ends
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    layer.receive_clean_locks.release(key)  # the cleaner finishes


async def two_receives_contend(layer) -> None:
    key = clean_lock_key(layer)
    await layer.receive_clean_locks.acquire(key)
    second = asyncio.ensure_future(layer.receive_clean_locks.acquire(key))
    await asyncio.sleep(0)
    layer.receive_clean_locks.release(key)
    await second
    layer.receive_clean_locks.release(key)


def test_a_layer_left_by_a_loop_that_ended_mid_receive_fails_the_next_loop(settings):
    settings.CHANNEL_LAYERS = REDIS_LAYER
    kept = get_channel_layer()
    asyncio.run(end_a_loop_while_a_receive_waits(kept))
    with pytest.raises(RuntimeError, match="different event loop"):
        asyncio.run(two_receives_contend(kept))  # what the next test met with a kept layer


def test_after_forgetting_the_next_loop_gets_a_layer_without_that_lock(settings):
    settings.CHANNEL_LAYERS = REDIS_LAYER
    kept = get_channel_layer()
    asyncio.run(end_a_loop_while_a_receive_waits(kept))
    forget_channel_layers()  # what tests/conftest.py does after each test
    fresh = get_channel_layer()
    assert fresh is not kept
    asyncio.run(two_receives_contend(fresh))
    asyncio.run(two_receives_contend(fresh))  # a layer used by one loop after another, none cancelled
