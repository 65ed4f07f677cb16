import json
import math

import msgspec

from agent import protocol
from agent.outbox import Outbox


def test_records_are_numbered_from_one_in_order():
    outbox = Outbox("f" * 32)
    outbox.put([{"t": 1.0, "gpu": "GPU-a", "m": {"gpu_util": 5}}] * 3)
    assert [seq for seq, _ in outbox.take()] == [1, 2, 3]


def test_values_that_are_not_finite_or_out_of_range_are_left_out():
    m = {"gpu_util": 101, "temp_c": math.nan, "power_mw": math.inf, "mem_used": 5,
         "fan_pct": True, "sm_occupancy_pct": 12.5}  # fmt: skip
    assert protocol.clean_metrics(m) == {"mem_used": 5, "sm_occupancy_pct": 12.5}


def test_a_record_with_nothing_left_to_send_is_skipped():
    outbox = Outbox("f" * 32)
    outbox.put([{"t": 1.0, "gpu": "GPU-a", "m": {"gpu_util": math.nan}}])
    assert outbox.take() == []


def test_processes_are_capped_keeping_the_largest():
    procs = [{"pid": p, "used_memory": p * 10} for p in range(1, 301)]
    kept = protocol.clean_procs(procs)
    assert len(kept) == protocol.MAX_PROCS and kept[0]["pid"] == 300


def test_events_keep_their_code_and_a_bounded_message():
    record = {"t": 1.0, "gpu": "GPU-a", "event": {"kind": "xid", "code": 79, "message": "x" * 5000}}
    event = protocol.clean_record(record)["event"]
    assert event["code"] == 79 and len(event["message"]) == protocol.MAX_MESSAGE


def test_a_samples_frame_is_valid_json():
    frame = json.loads(protocol.samples_frame("f" * 32, ['{"seq":1}', '{"seq":2}']))
    assert frame == {"type": "samples", "v": 1, "boot_id": "f" * 32,
                     "records": [{"seq": 1}, {"seq": 2}]}  # fmt: skip


def test_which_close_codes_the_agent_retries():
    assert protocol.close_action(1011) == protocol.RETRY
    assert protocol.close_action(4440) == protocol.RETRY  # token_expired
    assert protocol.close_action(4500) == protocol.RETRY  # server_error
    assert protocol.close_action(1006) == protocol.RETRY
    assert protocol.close_action(4408) == protocol.RETRY
    assert protocol.close_action(4400) == protocol.DROP
    assert protocol.close_action(4409) == protocol.DROP
    assert protocol.close_action(4413) == protocol.DROP
    assert protocol.close_action(4401) == protocol.FATAL


def test_plain_and_unusual_numbers_are_cleaned_by_the_same_rules():
    class Count(int):
        pass

    m = {"gpu_util": 99.5, "mem_used": 7.0, "mem_total": 7.5, "power_mw": Count(5),
         "temp_c": -51, "energy_mj": 2**64, "clocks_event_reasons": 2**64 - 1,
         "ecc_corrected_volatile": False, "future_metric": -3.25, "future_nan": -math.inf,
         "future_text": "3", "sm_clock_mhz": None}  # fmt: skip
    assert protocol.clean_metrics(m) == {"gpu_util": 99.5, "mem_used": 7, "power_mw": 5,
                                         "clocks_event_reasons": 2**64 - 1,
                                         "future_metric": -3.25}  # fmt: skip
    assert type(protocol.clean_metrics(m)["mem_used"]) is int


def test_process_entries_keep_only_well_formed_fields():
    procs = [{"pid": True}, {"pid": 2**32}, {"pid": 7, "used_memory": -1, "sm_util": 101},
             {"pid": 8, "used_memory": 5, "sm_util": 12.5}]  # fmt: skip
    assert protocol.clean_procs(procs) == [
        {"pid": 7},
        {"pid": 8, "used_memory": 5, "sm_util": 12.5},
    ]


def test_records_are_encoded_as_compact_ascii_json():
    record = {"t": 1796226411.615, "gpu": "GPU-\u00e9\n", "m": {"energy_mj": 2**64 - 1, "x": 0.1},
              "procs": [{"pid": 5, "cmd": "python \u00fc.py"}]}
    text = protocol.encode_record(record, 3)
    assert text.isascii()
    assert json.loads(text) == {"seq": 3, **record}
    assert text == json.dumps({"seq": 3, **record}, separators=(",", ":"))


def test_records_are_encoded_from_the_wire_schema_and_decode_with_it():
    raw = [{"t": 1796226411.5, "gpu": "GPU-a-0", "m": {"gpu_util": 5, "mem_used": 7.0, "temp_c": math.nan},
            "procs": [{"pid": 9, "used_memory": 4, "name": "python", "bogus": 1}]},
           {"t": 1796226412.0, "gpu": "GPU-a-0", "slice": "MIG-a-0-1", "m": {"sm_clock_mhz": 1410}},
           {"t": 1796226413.0, "gpu": "GPU-a-0", "event": {"kind": "xid", "code": 79, "message": "fell off the bus"}}]
    records = [protocol.to_record(r, seq) for seq, r in enumerate(raw, 1)]
    assert all(type(r) is protocol.Record for r in records)
    bodies = [protocol.encode(r) for r in records]
    assert bodies[0] == ('{"seq":1,"t":1796226411.5,"gpu":"GPU-a-0","m":{"gpu_util":5,"mem_used":7},'
                         '"procs":[{"pid":9,"used_memory":4,"name":"python"}]}')
    assert bodies[2] == '{"seq":3,"t":1796226413.0,"gpu":"GPU-a-0","event":{"kind":"xid","code":79,"message":"fell off the bus"}}'
    frame = msgspec.json.decode(protocol.samples_frame("f" * 32, bodies), type=protocol.Samples)
    assert (frame.boot_id, frame.v, [r.seq for r in frame.records]) == ("f" * 32, 1, [1, 2, 3])
    assert frame.records[1].slice == "MIG-a-0-1" and frame.records[1].m.sm_clock_mhz == 1410
    assert frame.records[2].event == protocol.Event(kind="xid", code=79, message="fell off the bus")


def test_events_the_server_would_refuse_are_not_sent():
    for event in ({"kind": "xid", "message": "no code"}, {"kind": "reboot"}):
        assert protocol.to_record({"t": 1796226413.0, "gpu": "GPU-a-0", "event": event}, 1) is None
    assert protocol.to_record({"t": 1796226413.0, "gpu": "GPU-a-0", "event": {"kind": "gpu_lost"}}, 1) is not None


def test_the_hello_is_encoded_from_the_wire_schema():
    gpu = {"uuid": "GPU-a-0", "index": 0, "name": "NVIDIA H200", "memory_total": 5, "mig_mode": False, "slices": [],
           "virtualization": "passthrough"}
    text = protocol.hello_frame(host="node-1", boot_id="f" * 32, backend="nvml", gpus=[gpu], driver="580.1")
    hello = msgspec.json.decode(text, type=protocol.Hello)
    assert (hello.host, hello.v, hello.driver, hello.gpus[0].virtualization) == ("node-1", 1, "580.1", "passthrough")
    assert json.loads(text) == {"type": "hello", "v": 1, "host": "node-1", "boot_id": "f" * 32, "agent": protocol.AGENT,
                                "backend": "nvml", "gpus": [gpu], "driver": "580.1"}
    assert "driver" not in protocol.hello_frame(host="node-1", boot_id="f" * 32, backend="sim", gpus=[])


def test_the_frame_envelope_is_the_schema_s():
    frame = protocol.samples_frame("f" * 32, [])
    assert len(frame) == protocol.FRAME_OVERHEAD
    assert json.loads(frame) == {"type": "samples", "v": 1, "boot_id": "f" * 32, "records": []}


def test_the_agent_sends_event_messages_without_nul():
    record = protocol.clean_record({"seq": 1, "t": 1.0, "gpu": "GPU-1", "event": {"kind": "xid", "code": 13, "message": "a\x00b"}})
    assert record["event"]["message"] == "ab"
