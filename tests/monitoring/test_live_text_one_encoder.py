"""Every browser message comes from one encoder, whether built whole or from readings
encoded once and joined."""

import json

from agent.protocol import NO_METRICS, LiveReading, Metrics
from console import live
from monitoring import fanout
from monitoring.readings import Live


def _old(event, data):
    return json.dumps({"event": event, "data": data}, separators=(",", ":"))


def test_a_message_has_the_bytes_it_always_had():
    for data in ({"message": "déjà vu"}, {"kind": "fleet", "id": None}, {"id": 7, "value": 2.5, "x": [1, "a"]}):
        assert live.encode("alert", data) == _old("alert", data)


def test_a_gpus_message_joined_from_packed_readings_is_the_encoders_text():
    readings = [Live(LiveReading(f"GPU-{i}", "h", i, None, 3, "2026-12-03T16:00:00+00:00",
                                 Metrics(gpu_util=50.0 + i, energy_mj=2**64 - 1) if i else NO_METRICS, False),
                     t=1.0, host_id=1) for i in range(3)]
    texts = [text for _, _, text in fanout.unpack(fanout.RECORD.join(map(fanout.pack, readings)))]
    [message] = fanout.gpus_texts(texts, 512 * 1024)
    assert message == live.encode("gpus", {"gpus": [json.loads(t) for t in texts]})
    assert json.loads(message)["data"]["gpus"][1]["m"] == {"gpu_util": 51.0, "energy_mj": 2**64 - 1}
    assert json.loads(message)["data"]["gpus"][0]["m"] == {}
