"""Records arrive at least once; (host, boot_id, seq) makes storage exactly once."""

import time

import pytest
from telemetry_wire import BOOT, Agent, new_boot, record, samples

from monitoring.models import AgentSession, GpuEvent, Sample

pytestmark = pytest.mark.django_db(transaction=True)

NOW = time.time()


async def send(token, *frames, **hello):
    acks = []
    async with Agent(token) as a:
        await a.hello(**hello)
        for frame in frames:
            await a.send(frame)
            acks.append(await a.recv())
    return acks


async def test_a_frame_sent_again_after_a_lost_ack_is_stored_once(tokens):
    frame = samples([record(1, t=NOW), record(2, t=NOW)])
    first = await send(tokens["h100-a"], frame)
    again = await send(tokens["h100-a"], frame)
    assert first == again == [{"type": "ack", "boot_id": BOOT, "seq": 2}]
    assert await Sample.objects.acount() == 2


async def test_an_overlapping_frame_stores_only_the_new_records(tokens):
    await send(tokens["h100-a"], samples([record(1, t=NOW), record(2, t=NOW)]))
    acks = await send(tokens["h100-a"], samples([record(2, t=NOW), record(3, t=NOW), record(4, t=NOW)]))
    assert acks[0]["seq"] == 4
    assert await Sample.objects.acount() == 4


async def test_a_repeated_frame_on_one_connection_is_acked_not_stored(tokens):
    frame = samples([record(7, t=NOW)])
    acks = await send(tokens["h100-a"], frame, frame)
    assert [a["seq"] for a in acks] == [7, 7]
    assert await Sample.objects.acount() == 1


async def test_records_of_an_earlier_boot_are_accepted(tokens):
    earlier = new_boot()
    acks = await send(tokens["h100-a"], samples([record(3, t=NOW - 600)], boot_id=earlier),
                      samples([record(1, t=NOW)]))
    assert acks == [{"type": "ack", "boot_id": earlier, "seq": 3}, {"type": "ack", "boot_id": BOOT, "seq": 1}]
    assert await AgentSession.objects.filter(boot_id=earlier, last_seq=3).aexists()


async def test_gaps_in_seq_are_fine(tokens):
    acks = await send(tokens["h100-a"], samples([record(1, t=NOW), record(90, t=NOW)]), samples([record(200, t=NOW)]))
    assert [a["seq"] for a in acks] == [90, 200]
    assert await Sample.objects.acount() == 3


async def test_records_of_unknown_gpus_and_event_kinds_are_acked_and_dropped(tokens):
    frame = samples([
        record(1, t=NOW),
        record(2, gpu="GPU-gone-since", t=NOW),
        record(3, gpu="GPU-h100-b-0", t=NOW),
        {"seq": 4, "t": NOW, "gpu": "GPU-h100-a-0", "event": {"kind": "future_kind"}},
    ])
    acks = await send(tokens["h100-a"], frame)
    assert acks[0]["seq"] == 4
    assert await Sample.objects.acount() == 1
    assert not await GpuEvent.objects.filter(kind="future_kind").aexists()


async def test_two_connections_of_one_host_never_store_twice(tokens):
    frame = samples([record(1, t=NOW), record(2, t=NOW)])
    async with Agent(tokens["h100-a"]) as a, Agent(tokens["h100-a"]) as b:
        await a.hello()
        await b.hello()
        await a.send(frame)
        await b.send(frame)
        assert (await a.recv())["seq"] == (await b.recv())["seq"] == 2
    assert await Sample.objects.acount() == 2
