"""A table of hostile websocket input, through the whole ASGI application: each gets its
documented close code (docs/agent-protocol.md, docs/live-protocol.md) and writes nothing."""

import json
import time

import pytest

from instances.models import Instance
from monitoring.models import GpuEvent, Sample

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = "[" * 5000 + "]" * 5000
NOW = time.time()
BOOT = "0123456789abcdef0123456789abcdef"


def hello(**extra):
    gpus = [{"uuid": f"GPU-h100-a-{i}", "index": i, "name": "H100-80GB", "memory_total": 80 * 2**30,
             "mig_mode": False, "slices": []} for i in range(8)]
    return {"type": "hello", "v": 1, "host": "h100-a", "boot_id": BOOT, "agent": "test/1", "backend": "sim",
            "gpus": gpus, **extra}


def samples(*records, **extra):
    return {"type": "samples", "v": 1, "boot_id": BOOT, "records": list(records), **extra}


def record(**m):
    return {"seq": 1, "t": NOW, "gpu": "GPU-h100-a-0", "m": m or {"gpu_util": 50.0}}


def deep_object(levels):
    return "{" + '"a": {' * levels + "}" * levels + "}"


# (name, frame sent before hello, frame sent after hello or None, close code, error code)
AGENT = [
    ("5,000 [ as the hello", DEEP, None, 4400, "bad_json"),
    ("5,000 [ after the hello", None, DEEP, 4400, "bad_json"),
    ("deep object inside a record", None,
     json.dumps(samples(record())).replace('"gpu_util": 50.0', '"gpu_util": 50.0, "x": ' + deep_object(40)),
     4400, "bad_json"),
    ("deep hello field", json.dumps(hello()).replace('"agent": "test/1"', '"agent": ' + deep_object(40)), None,
     4400, "bad_json"),
    ("a hello over 64 KiB", json.dumps(hello(pad="x" * 70_000)), None, 4413, "frame_too_large"),
    ("a frame over 512 KiB", None, json.dumps(samples(record(), pad="x" * 530_000)), 4413, "frame_too_large"),
    ("NUL in the GPU UUID", None, json.dumps(samples({**record(), "gpu": "GPU-h100-a-0\u0000"})), 4400,
     "bad_field"),
    ("NUL in the host name", json.dumps(hello(host="h100-a\u0000")), None, 4400, "bad_field"),
    ("lone surrogate", None, json.dumps(samples(record())).replace('"GPU-h100-a-0"', '"GPU-\\ud800"'), 4400,
     "bad_field"),
    ("lone surrogate in the hello's driver", json.dumps(hello(driver="550.54\ud800")), None, 4400, "bad_field"),
    ("lone surrogate in the hello's agent", json.dumps(hello(agent="\udfff")), None, 4400, "bad_field"),
    ("lone surrogate in an event's message", None,
     json.dumps(samples({"seq": 1, "t": NOW, "gpu": "GPU-h100-a-0", "event": {"kind": "xid", "code": 79,
                                                                             "message": "bus\ud800"}})),
     4400, "bad_field"),
    ("lone surrogate in a process name", None,
     json.dumps(samples({"seq": 1, "t": NOW, "gpu": "GPU-h100-a-0", "procs": [{"pid": 7, "name": "\ud800"}]})),
     4400, "bad_field"),
    ("an xid event without its code", None,
     json.dumps(samples({"seq": 1, "t": NOW, "gpu": "GPU-h100-a-0", "event": {"kind": "xid", "message": "x"}})),
     4400, "bad_field"),
    ("integer too large", None, json.dumps(samples({**record(), "seq": 2**80})), 4400, "bad_field"),
    ("time in year 9999", None, json.dumps(samples({**record(), "t": 253_402_300_799.0})), 4400, "bad_field"),
    ("huge exponent", None, json.dumps(samples(record())).replace("50.0", "1e999999"), 4400, "bad_field"),
    ("NaN", None, json.dumps(samples(record())).replace("50.0", "NaN"), 4400, "bad_field"),
    ("binary", b"\x00" * 16, None, 4400, "bad_frame"),
    ("not UTF-8 JSON", "\udcff", None, 4400, "bad_json"),
    ("a bare number", "1" * 5000, None, 4400, "bad_json"),
    ("samples before hello", json.dumps(samples(record())), None, 4408, "hello_required"),
]


@pytest.mark.parametrize(("before", "after", "close_code", "code"), [a[1:] for a in AGENT], ids=[a[0] for a in AGENT])
async def test_hostile_agent_frames(agent_socket, host_token, before, after, close_code, code):
    ws = agent_socket(host_token)
    assert (await ws.open())[0]
    if before is None:
        await ws.send(hello())
        assert (await ws.recv())["type"] == "welcome"
        before = after
    await ws.send(before)
    closed, sent = await ws.closed()
    await ws.disconnect()
    assert (closed, [f.get("code") for f in sent]) == (close_code, [code])
    assert await Sample.objects.acount() == 0
    assert await GpuEvent.objects.acount() == 0


LIVE = [
    ("5,000 [", DEEP, 4400),
    ("deep subscribe", '{"subscribe": ' + deep_object(40) + "}", 4400),
    ("a message over 4 KiB", json.dumps({"subscribe": {"kind": "fleet", "pad": "x" * 5000}}), 4400),
    ("not JSON", "{nope", 4400),
    ("binary", b"\x00\x01", 4400),
    ("NUL kind", json.dumps({"subscribe": {"kind": "team\u0000", "id": 1}}), 4400),
    ("id too large", json.dumps({"subscribe": {"kind": "instance", "id": 2**64}}), 4400),
    ("id a float", json.dumps({"subscribe": {"kind": "instance", "id": 1.5}}), 4400),
    ("id a string", json.dumps({"subscribe": {"kind": "instance", "id": "1"}}), 4400),
    ("two verbs", json.dumps({"subscribe": {"kind": "fleet"}, "unsubscribe": {"kind": "fleet"}}), 4400),
    ("fleet as a member", json.dumps({"subscribe": {"kind": "fleet"}}), 4403),
    ("another team's instance", "GLOBEX", 4403),
]


@pytest.mark.parametrize(("message", "close_code"), [item[1:] for item in LIVE], ids=[item[0] for item in LIVE])
async def test_hostile_live_messages(live_socket, bob, globex_instance, message, close_code):
    if message == "GLOBEX":
        message = json.dumps({"subscribe": {"kind": "instance", "id": globex_instance.pk}})
    before = await Instance.objects.acount()
    ws = await live_socket(bob)
    assert (await ws.open())[0]
    await ws.send(message)
    closed, _ = await ws.closed()
    await ws.disconnect()
    assert closed == close_code
    assert await Instance.objects.acount() == before


async def test_anonymous_live_socket_is_closed_4401(live_socket):
    ws = await live_socket(None)
    assert (await ws.open())[0]
    assert (await ws.closed())[0] == 4401
    await ws.disconnect()


@pytest.mark.parametrize("path", ["/", "/ws/", "/ws/agent", "/ws/agents/", "/api/v1/", "/ws/live/%00/"])
async def test_a_path_with_no_route_is_refused_at_the_handshake(agent_socket, path):
    ws = agent_socket("whatever", path=path)
    connected, _ = await ws.open()
    assert not connected
    await ws.disconnect()


async def test_messages_queued_behind_the_one_that_closed_the_socket_get_no_answer(live_socket, ops, fleet):
    """A burst past the subscription limit: the first message over it is answered with an
    error and close 4400; the ones already queued behind it are dropped, not answered on
    a closed socket."""
    from console.models import Team
    from monitoring.consumers import MAX_SUBSCRIPTIONS

    teams = await Team.objects.abulk_create(Team(name=f"Burst {n}", slug=f"burst-{n}")
                                            for n in range(MAX_SUBSCRIPTIONS + 5))
    ws = await live_socket(ops)
    assert (await ws.open())[0]
    for team in teams:
        await ws.send({"subscribe": {"kind": "team", "id": team.pk}})
    closed, sent = await ws.closed()
    assert closed == 4400
    assert [f.get("event") for f in sent].count("error") == 1
    assert await ws.ws.receive_nothing(timeout=0.5)
    await ws.disconnect()
