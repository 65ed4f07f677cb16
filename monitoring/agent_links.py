"""Other apps' parts of an agent's websocket. The network app keeps its hosts' rulesets
on the agent's connection (``NetworkConfig.ready`` registers ``network.agent_link``):
a link is told when an agent has been welcomed and when it leaves, and reads the frames
that start with its prefix. Monitoring owns the socket and imports none of them."""

from __future__ import annotations

from typing import Protocol


class AgentLink(Protocol):
    prefix: str  # the start of the frames this link reads, e.g. '{"type":"ruleset_applied"'

    async def joined(self, consumer) -> None: ...

    async def left(self, consumer) -> None: ...

    async def read(self, consumer, text: str) -> None: ...


_links: list[AgentLink] = []


def register(link: AgentLink) -> None:
    if link not in _links:
        _links.append(link)


def reader_of(text) -> AgentLink | None:
    """The link whose frames ``text`` is, if any (a frame of the telemetry stream is none's)."""
    if isinstance(text, str):
        for link in _links:
            if text.startswith(link.prefix):
                return link
    return None


async def joined(consumer) -> None:
    for link in _links:
        await link.joined(consumer)


async def left(consumer) -> None:
    for link in _links:
        await link.left(consumer)
