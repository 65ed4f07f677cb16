"""Every bad frame gets an error naming what is wrong and a documented close code;
nothing of it is stored, it is counted, and other agents carry on."""

import json
import time

import msgspec
import pytest
from telemetry_wire import BOOT, hello, record, samples

from monitoring import frames
from monitoring.models import AgentState, Sample

db = pytest.mark.django_db(transaction=True)

NOW = time.time()
GOOD = record(1, t=NOW)


def frame_with(**changes):
    frame = samples([GOOD, record(2, t=NOW)])
    frame.update(changes)
    return frame


def with_record(**changes):
    return samples([GOOD, {**record(2, t=NOW), **changes}])


def with_metric(name, value):
    return samples([GOOD, record(2, t=NOW, **{name: value})])


BAD = [
    ("not json", "{nope", 4400, "bad_json"),
    ("a list", "[1, 2]", 4400, "bad_json"),
    ("NaN", json.dumps(samples([GOOD])).replace('"gpu_util": 50.0', '"gpu_util": NaN'), 4400, "bad_field"),
    ("Infinity", json.dumps(samples([GOOD])).replace('"gpu_util": 50.0', '"gpu_util": Infinity'), 4400, "bad_field"),
    ("wrong version", frame_with(v=2), 4426, "unsupported_version"),
    ("unknown type", frame_with(type="metrics"), 4400, "unknown_type"),
    ("bad boot_id", frame_with(boot_id="xyz"), 4400, "bad_field"),
    ("records not a list", frame_with(records={"seq": 1}), 4400, "bad_field"),
    ("no records", frame_with(records=[]), 4400, "bad_field"),
    ("too many records", frame_with(records=[record(i + 1, t=NOW) for i in range(501)]), 4400, "bad_field"),
    ("too many bytes", frame_with(pad="x" * 600_000), 4413, "frame_too_large"),
    ("string metric", with_metric("gpu_util", "50"), 4400, "bad_field"),
    ("bool metric", with_metric("temp_c", True), 4400, "bad_field"),
    ("utilization over 100", with_metric("gpu_util", 150), 4400, "bad_field"),
    ("negative power", with_metric("power_mw", -5), 4400, "bad_field"),
    ("integer written as a float", with_metric("mem_used", 1.0), 4400, "bad_field"),
    ("huge unknown metric", json.dumps(samples([GOOD])).replace('"gpu_util": 50.0', '"gpu_util": 50.0, "x": 1e400'), 4400, "bad_field"),
    ("seq not an integer", with_record(seq="2"), 4400, "bad_field"),
    ("time a day ahead", with_record(t=NOW + 86_400 + 600), 4400, "bad_field"),
    ("time before 2000", with_record(t=12.5), 4400, "bad_field"),
    ("no gpu", samples([GOOD, {k: v for k, v in record(2, t=NOW).items() if k != "gpu"}]), 4400, "bad_field"),
    ("malformed GPU UUID", with_record(gpu="gpu 0"), 4400, "bad_field"),
    ("negative seq", with_record(seq=-1), 4400, "bad_field"),
    ("bad metric name", with_metric("Bad-Name", 1), 4400, "bad_field"),
    ("event kind not a string", samples([GOOD, {"seq": 2, "t": NOW, "gpu": "GPU-h100-a-0", "event": {"kind": 7}}]), 4400, "bad_field"),
    ("event with metrics", with_record(event={"kind": "gpu_lost"}), 4400, "bad_frame"),
    ("xid code out of range", samples([GOOD, {"seq": 2, "t": NOW, "gpu": "GPU-h100-a-0", "event": {"kind": "xid", "code": 70000}}]), 4400, "bad_field"),
    ("neither metrics nor event", samples([GOOD, {"seq": 2, "t": NOW, "gpu": "GPU-h100-a-0"}]), 4400, "bad_frame"),
    ("too many processes", with_record(procs=[{"pid": i} for i in range(300)]), 4400, "bad_field"),
    ("seq going backwards", samples([record(5, t=NOW), record(4, t=NOW)]), 4409, "seq_not_increasing"),
    ("seq repeated", samples([record(5, t=NOW), record(5, t=NOW)]), 4409, "seq_not_increasing"),
    ("second hello", hello(), 4400, "unexpected_hello"),
    ("binary", b"\x00\x01", 4400, "bad_frame"),
]


def check(frame) -> None:
    text = frame if isinstance(frame, str | bytes) else json.dumps(frame)
    frames.read(text, now=NOW)


@pytest.mark.parametrize(("frame", "close_code", "code"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_every_bad_frame_class_has_its_code(frame, close_code, code):
    with pytest.raises(frames.FrameError) as caught:
        check(frame)
    assert (caught.value.close_code, caught.value.code) == (close_code, code)
    assert caught.value.message


def test_good_frames_pass():
    check(samples([GOOD, record(2, t=NOW, gpu_util=0, mem_used=2**40, energy_mj=2**64 - 1, future_metric=3.5)]))


@db
@pytest.mark.parametrize("name", ["not json", "wrong version", "too many bytes", "seq going backwards", "second hello"])
async def test_the_server_refuses_the_frame_whole(agent, tokens, name):
    frame, close_code, code = next(b[1:] for b in BAD if b[0] == name)
    async with agent(tokens["h100-a"]) as a:
        await a.hello()
        await a.send(frame)
        error = await a.recv()
        assert (error["type"], error["code"]) == ("error", code)
        assert await a.closed() == close_code
    assert await Sample.objects.acount() == 0
    assert (await AgentState.objects.aget(host__name="h100-a")).bad_frames == 1


@db
async def test_the_error_names_the_field(agent, tokens):
    async with agent(tokens["h100-a"]) as a:
        await a.hello()
        await a.send(with_metric("gpu_util", 150))
        error = await a.recv()
    assert error["message"] == "records[1].m.gpu_util must be a number between 0 and 100"
    assert (error["boot_id"], error["seq"]) == (BOOT, 1)


@db
async def test_samples_before_hello_are_refused(agent, tokens):
    async with agent(tokens["h100-a"]) as a:
        await a.send(samples([GOOD]))
        assert (await a.recv())["code"] == "hello_required"
        assert await a.closed() == 4408


@db
async def test_other_agents_carry_on(agent, tokens):
    async with agent(tokens["h100-a"]) as a, agent(tokens["h100-b"]) as b:
        await a.hello()
        await b.hello(host="h100-b")
        await a.send("{nope")
        assert await a.closed() == 4400
        await b.send(samples([record(1, gpu="GPU-h100-b-0", t=NOW)]))
        assert (await b.recv())["type"] == "ack"
    assert await Sample.objects.acount() == 1


def test_extra_keys_are_ignored():
    frame = samples([{**record(1, t=NOW), "future": 1, "procs": [{"pid": 1, "container": "x"}, {"pid": 2, "used_memory": 5}]}])
    frame["future"] = {"any": "thing"}
    batch = frames.read(json.dumps(frame), now=NOW)
    assert msgspec.to_builtins(batch.records[0].procs) == [{"pid": 1}, {"pid": 2, "used_memory": 5}]


def test_a_bad_process_after_an_extra_key_is_still_caught():
    frame = samples([{**record(1, t=NOW), "procs": [{"pid": 1, "container": "x"}, {"pid": -2}]}])
    with pytest.raises(frames.FrameError, match=r"records\[0\].procs\[1\].pid"):
        check(frame)


# A frame without backslashes or DEL is decoded without the patterns that only refuse
# control characters, and its GPU and slice UUIDs are checked once each: the same rules
# and the same errors as the full schema.
UUID_AND_TEXT = [
    ("malformed GPU UUID, no escapes", with_record(gpu="GPU-h100 a"), r"records\[1\]\.gpu 'GPU-h100 a' is not well formed"),
    ("malformed slice UUID", with_record(slice="MIG-1 2"), r"records\[1\]\.slice 'MIG-1 2' is not well formed"),
    ("NUL in a process name", with_record(procs=[{"pid": 1, "name": "a\x00b"}]),
     r"records\[1\]\.procs\[0\]\.name contains control characters"),
    ("DEL in an event kind", samples([GOOD, {"seq": 2, "t": NOW, "gpu": "GPU-h100-a-0", "event": {"kind": "x\x7f"}}]),
     r"records\[1\]\.event\.kind contains control characters"),
    ("newline in an event kind", samples([GOOD, {"seq": 2, "t": NOW, "gpu": "GPU-h100-a-0", "event": {"kind": "x\ny"}}]),
     r"records\[1\]\.event\.kind contains control characters"),
    ("NUL in an event message", samples([GOOD, {"seq": 2, "t": NOW, "gpu": "GPU-h100-a-0",
                                                "event": {"kind": "xid", "code": 79, "message": "fell off\x00"}}]),
     r"records\[1\]\.event\.message contains control characters"),
]


@pytest.mark.parametrize(("frame", "message"), [u[1:] for u in UUID_AND_TEXT], ids=[u[0] for u in UUID_AND_TEXT])
def test_patterns_hold_on_the_fast_path(frame, message):
    with pytest.raises(frames.FrameError, match=message) as caught:
        check(json.dumps(frame, ensure_ascii=False))
    assert (caught.value.close_code, caught.value.code) == (4400, "bad_field")


def test_backslashes_and_del_where_allowed_pass():
    procs = [{"pid": 1, "name": "a\\b", "cmd": 'say "hi"\x7f'}]
    batch = frames.read(json.dumps(samples([{**record(1, t=NOW), "procs": procs}]), ensure_ascii=False), now=NOW)
    assert msgspec.to_builtins(batch.records[0].procs) == procs


def test_a_counter_past_64_bits_is_refused_by_name():
    with pytest.raises(frames.FrameError) as refused:
        frames.read(json.dumps(with_metric("energy_mj", 2**64)), now=time.time())
    assert (refused.value.code, refused.value.close_code) == ("bad_field", 4400)
    assert refused.value.message.startswith("records[1].m.energy_mj must be an integer between 0 and ")


def test_counters_at_their_top_are_kept_whatever_their_sum():
    text = json.dumps(samples([GOOD, record(2, t=NOW, energy_mj=2**64 - 1, pcie_tx_bytes=2**64 - 1)]))
    m = frames.read(text, now=time.time()).records[1].m
    assert (m.energy_mj, m.pcie_tx_bytes) == (2**64 - 1, 2**64 - 1)
