"""With several ASGI workers every process coalesces its own agents' readings, and a
socket may watch a team and one of its instances: the browser still gets each reading
once, in at most one ``gpus`` message per interval."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client

from agent.protocol import LiveReading, Metrics
from monitoring import fanout
from monitoring.readings import PUBLIC_KEYS, Live
from monitoring.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = URLRouter(websocket_urlpatterns)
INTERVAL = 0.1


def reading(uuid, t, instance, *, stale=False):
    return Live(LiveReading(uuid, "h", 0, instance.pk, instance.team_id, f"t{t}", Metrics(gpu_util=t), stale),
                t=float(t), host_id=1)


def cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
def watching(settings, bob, acme_instance):
    settings.LIVE_COALESCE_S = INTERVAL

    async def open_socket():
        headers = [(b"origin", b"http://testserver"), (b"cookie", await sync_to_async(cookie)(bob))]
        ws = WebsocketCommunicator(APP, "/ws/live/", headers=headers)
        assert (await ws.connect())[0]
        for kind, ident in (("team", acme_instance.team_id), ("instance", acme_instance.pk)):
            await ws.send_to(text_data=json.dumps({"subscribe": {"kind": kind, "id": ident}}))
            assert json.loads(await ws.receive_from())["event"] == "subscribed"
        return ws

    return open_socket


async def received(ws) -> list[tuple[float, list[dict]]]:
    got = []
    while not await ws.receive_nothing(timeout=1, interval=0.005):
        message = json.loads(await ws.receive_from())
        got.append((asyncio.get_running_loop().time(), message["data"]["gpus"]))
    return got


async def test_each_reading_arrives_once_from_two_workers_and_two_groups(watching, acme_instance):
    ws = await watching()
    listening = asyncio.ensure_future(received(ws))  # times each message as it comes
    workers = fanout.Coalescer(INTERVAL), fanout.Coalescer(INTERVAL)  # one per server process
    for t in range(1, 6):
        workers[0].offer({"gpu-a": reading("gpu-a", t, acme_instance)})
        workers[1].offer({"gpu-b": reading("gpu-b", t, acme_instance)})
        await asyncio.sleep(4 * INTERVAL)
    messages = await listening
    readings = [(gpu["uuid"], gpu["t"]) for _, gpus in messages for gpu in gpus]
    assert sorted(readings) == sorted((uuid, f"t{t}") for uuid in ("gpu-a", "gpu-b") for t in range(1, 6))
    assert all(set(gpu) == set(PUBLIC_KEYS) for _, gpus in messages for gpu in gpus)
    await ws.disconnect()


async def test_an_older_reading_heard_late_is_not_sent(watching, acme_instance):
    ws = await watching()
    fast, slow = fanout.Coalescer(INTERVAL), fanout.Coalescer(INTERVAL)
    fast.offer({"gpu-a": reading("gpu-a", 2, acme_instance)})
    await asyncio.sleep(3 * INTERVAL)
    slow.offer({"gpu-a": reading("gpu-a", 1, acme_instance)})  # a replayed, older reading
    messages = await received(ws)
    assert [gpu["t"] for _, gpus in messages for gpu in gpus] == ["t2"]
    await ws.disconnect()


async def test_a_stale_mark_follows_the_reading_it_marks(watching, acme_instance):
    ws = await watching()
    worker = fanout.Coalescer(INTERVAL)
    worker.offer({"gpu-a": reading("gpu-a", 1, acme_instance)})
    await asyncio.sleep(3 * INTERVAL)
    await fanout.send_each(fanout.sends([reading("gpu-a", 1, acme_instance, stale=True)]))
    messages = await received(ws)
    assert [(gpu["t"], gpu["stale"]) for _, gpus in messages for gpu in gpus] == [("t1", False), ("t1", True)]
    await ws.disconnect()


async def test_a_socket_sends_at_most_one_message_per_interval():
    sent = []

    async def send(text):
        sent.append((asyncio.get_running_loop().time(), json.loads(text)["data"]["gpus"]))

    merge = fanout.SocketMerge(INTERVAL, send)
    start = asyncio.get_running_loop().time()
    for t in range(1, 21):  # twenty readings from many workers, 10 ms apart
        merge.add(fanout.pack(reading_of(f"gpu-{t % 3}", t)))
        await asyncio.sleep(0.01)
    spread = asyncio.get_running_loop().time() - start
    await asyncio.sleep(2 * INTERVAL)
    times = [when for when, _ in sent]
    assert all(b - a >= INTERVAL - 0.005 for a, b in zip(times, times[1:], strict=False))
    assert len(sent) <= spread / INTERVAL + 2  # the first at once, then one per interval
    newest = {gpu["uuid"]: gpu["t"] for _, gpus in sent for gpu in gpus}
    assert newest == {"gpu-0": "t18", "gpu-1": "t19", "gpu-2": "t20"}


def reading_of(uuid, t):
    return Live(LiveReading(uuid, "h", 0, None, None, f"t{t}", Metrics(), False), t=float(t), host_id=1)


async def test_messages_heard_before_a_flush_are_merged_reading_by_reading():
    sent = []

    async def send(text):
        sent.append(json.loads(text)["data"]["gpus"])

    def message(*readings):
        return fanout.RECORD.join(fanout.pack(reading_of(uuid, t)) for uuid, t in readings)

    merge = fanout.SocketMerge(INTERVAL, send)
    merge.add(message(("gpu-x", 1)))  # goes at once; the next batch waits for the interval
    await asyncio.sleep(0)
    first = message(("gpu-a", 1), ("gpu-b", 1))
    merge.add(first)
    merge.add(first)  # the same readings again (a second group of this socket)
    merge.add(message(("gpu-a", 2), ("gpu-b", 0.5), ("gpu-c", 1), ("gpu-x", 1)))
    await asyncio.sleep(2 * INTERVAL)
    assert [[(g["uuid"], g["t"]) for g in gpus] for gpus in sent] == [
        [("gpu-x", "t1")], [("gpu-a", "t2"), ("gpu-b", "t1"), ("gpu-c", "t1")]]


async def test_a_message_sent_as_it_is_still_leaves_out_what_the_socket_showed():
    sent = []

    async def send(text):
        sent.append([(g["uuid"], g["t"]) for g in json.loads(text)["data"]["gpus"]])

    merge = fanout.SocketMerge(INTERVAL, send)
    merge.add(fanout.pack(reading_of("gpu-a", 5)))
    await asyncio.sleep(2 * INTERVAL)
    merge.add(fanout.RECORD.join(fanout.pack(reading_of(uuid, t)) for uuid, t in (("gpu-a", 4), ("gpu-b", 4))))
    await asyncio.sleep(2 * INTERVAL)
    merge.add(fanout.RECORD.join(fanout.pack(reading_of(uuid, t)) for uuid, t in (("gpu-a", 6), ("gpu-b", 6))))
    await asyncio.sleep(2 * INTERVAL)
    assert sent == [[("gpu-a", "t5")], [("gpu-b", "t4")], [("gpu-a", "t6"), ("gpu-b", "t6")]]


async def test_a_message_heard_while_the_socket_is_sending_goes_in_the_next_batch():
    """A socket's send can wait (a slow browser, a server that applies push-back); a
    message heard meanwhile is sent after the interval, not left until the next one."""
    sent = []

    async def slow_send(text):
        sent.append([(g["uuid"], g["t"]) for g in json.loads(text)["data"]["gpus"]])
        await asyncio.sleep(0.05)

    merge = fanout.SocketMerge(INTERVAL, slow_send)
    merge.add(fanout.pack(reading_of("gpu-a", 1)))
    await asyncio.sleep(0.02)  # the first batch is being sent
    merge.add(fanout.pack(reading_of("gpu-b", 1)))
    await asyncio.sleep(3 * INTERVAL)
    assert sent == [[("gpu-a", "t1")], [("gpu-b", "t1")]]
