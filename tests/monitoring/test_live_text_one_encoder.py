"""Every browser message comes from one encoder, whether built whole or from readings
encoded once and joined."""

import json

import msgspec

from agent.protocol import LIVE_EVENTS, NO_METRICS, Gpus, LiveReading, Metrics
from console import live
from monitoring import fanout
from monitoring.readings import Live


def _old(event, data):
    return json.dumps({"event": event, "data": data}, separators=(",", ":"))


def test_a_message_has_the_bytes_it_always_had():
    for event, data in (("error", {"message": "déjà vu"}), ("subscribed", {"kind": "fleet", "id": None}),
                        ("instance", {"id": 7, "name": "a", "state": "running", "team": 2})):
        assert live.encode(event, msgspec.convert(data, LIVE_EVENTS[event])) == _old(event, data)


def test_a_gpus_message_joined_from_packed_readings_is_the_encoders_text():
    readings = [Live(LiveReading(f"GPU-{i}", "h", i, None, 3, "2026-12-03T16:00:00+00:00",
                                 Metrics(gpu_util=50.0 + i, energy_mj=2**64 - 1) if i else NO_METRICS, False),
                     t=1.0, host_id=1) for i in range(3)]
    texts = [text for _, _, text in fanout.unpack(fanout.RECORD.join(map(fanout.pack, readings)))]
    [message] = fanout.gpus_texts(texts, 512 * 1024)
    assert message == live.encode("gpus", Gpus([msgspec.json.decode(t, type=LiveReading) for t in texts]))
    assert json.loads(message)["data"]["gpus"][1]["m"] == {"gpu_util": 51.0, "energy_mj": 2**64 - 1}
    assert json.loads(message)["data"]["gpus"][0]["m"] == {}
