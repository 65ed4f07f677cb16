"""A flush of more GPUs than one websocket message holds reaches the browser whole,
under a real daphne (whose websocket library refuses to send a message over
WEBSOCKET_MAX_MESSAGE_BYTES, so one oversized message would lose every reading in it)."""

import asyncio
import json

import pytest
import websockets
from daphne_support import LIMIT, ROOT, serve

from monitoring import fanout


@pytest.fixture(scope="module")
def daphne():
    with serve("live_flush_app:application", ROOT / "tests" / "monitoring") as base:
        yield base + "/ws/live/"


async def flush(url: str, count: int) -> list[str]:
    """The messages a browser receives for one flush of ``count`` GPUs."""
    texts, got = [], 0
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(f"flush {count}")
        while got < count:
            text = await asyncio.wait_for(ws.recv(), 10)
            texts.append(text)
            got += len(json.loads(text)["data"]["gpus"])
        with pytest.raises(TimeoutError):  # nothing more: each reading once
            await asyncio.wait_for(ws.recv(), 0.3)
    return texts


@pytest.mark.parametrize("count", [1_200, 3_000])
def test_a_flush_of_thousands_of_gpus_arrives_whole_in_messages_under_the_limit(daphne, count):
    texts = asyncio.run(flush(daphne, count))
    assert sum(len(text) for text in texts) > LIMIT  # one message could not hold it
    assert all(len(text.encode()) <= LIMIT for text in texts)
    gpus = [gpu for text in texts for gpu in json.loads(text)["data"]["gpus"]]
    assert sorted(gpu["uuid"] for gpu in gpus) == sorted(f"GPU-{i:08d}-c4d9-ea4f-fa04-56bccf2abc35" for i in range(count))
    assert all(json.loads(text)["event"] == "gpus" for text in texts)
    assert gpus[0]["m"]["tensor_active_pct"] == 88.5 and gpus[0]["stale"] is False


def test_a_batch_is_split_only_where_it_must_be():
    texts = [json.dumps({"uuid": f"g{i}", "pad": "x" * 90}) for i in range(30)]  # 110 bytes each
    messages = fanout.gpus_texts(texts, limit=1_000)
    assert all(len(m) <= 1_000 for m in messages)
    assert [g["uuid"] for m in messages for g in json.loads(m)["data"]["gpus"]] == [f"g{i}" for i in range(30)]
    assert len(messages) == 4  # 8 readings fill 1,000 bytes: 30 need four messages, not more
    assert fanout.gpus_texts(texts[:2], limit=1_000) == [fanout.GPUS_HEAD + ",".join(texts[:2]) + fanout.GPUS_TAIL]
    assert json.loads(fanout.gpus_texts(texts[:2], limit=1_000)[0]) == {"event": "gpus", "data": {
        "gpus": [json.loads(t) for t in texts[:2]]}}
