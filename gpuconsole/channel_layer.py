"""The Redis channel layer, with a connection pool that waits for a free connection.

redis-py's asyncio pool holds at most ``max_connections`` (100 by default) and refuses
the next command at once (``MaxConnectionsError``) instead of waiting for one. A server
process issues a channel-layer command per agent or browser that connects, per group it
joins and per group send, so a burst (every agent of a large fleet reconnecting after a
restart) failed connections with "Too many connections". This layer's pool waits for a
connection instead, up to ``REDIS_POOL_WAIT_S``; the number of connections per process
stays bounded (``REDIS_MAX_CONNECTIONS``).

It also tells which groups have a member (``watched``), so the live fan-out sends
only to those (console/live.py).
"""

from __future__ import annotations

from channels_redis.core import RedisChannelLayer as BaseRedisChannelLayer
from django.conf import settings
from redis.asyncio import BlockingConnectionPool


class RedisChannelLayer(BaseRedisChannelLayer):
    def create_pool(self, index):
        host = dict(self.hosts[index])
        address = host.pop("address", None)
        if address is None:  # sentinels: channels-redis's own pool
            return super().create_pool(index)
        return BlockingConnectionPool.from_url(
            address, max_connections=settings.REDIS_MAX_CONNECTIONS, timeout=settings.REDIS_POOL_WAIT_S, **host
        )

    async def watched(self, groups: list[str]) -> set[str]:
        """The groups among ``groups`` whose member set exists (a group's key goes with
        its last member): one pipelined ``EXISTS`` per shard for all of them."""
        by_shard: dict[int, list[str]] = {}
        for group in groups:
            by_shard.setdefault(self.consistent_hash(group), []).append(group)
        found = set()
        for index, names in by_shard.items():
            pipe = self.connection(index).pipeline(transaction=False)
            for name in names:
                pipe.exists(self._group_key(name))
            found.update(name for name, n in zip(names, await pipe.execute(), strict=True) if n)
        return found
