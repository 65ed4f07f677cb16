import itertools
import time

import pytest

from agent.backends.replay import ReplaySource, Trace, TraceError


def play(source: ReplaySource) -> list[dict]:
    received = []
    source.start(lambda host, recs: received.extend(recs))
    assert source.done.wait(10)
    source.stop()
    return received


def test_it_plays_the_trace_as_one_gpu(trace):
    gpu = ReplaySource(trace, host="replay-host").hosts()[0].gpus[0]
    assert gpu["uuid"] == "GPU-cc7cc80c-c4d9-ea4f-fa04-56bccf2abc35"
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["memory_total"] == 150754820096
    assert gpu["power_limit_mw"] == 700000
    assert gpu["pci_bus_id"] == "00000000:00:06.0"


def test_it_reproduces_every_recorded_value(trace):
    source = ReplaySource(trace, host="h", speed=1000, once=True)
    frames = list(source.frames())
    assert len(frames) == 370
    for (_, line, m), raw in zip(frames, trace.lines, strict=True):
        assert m == raw.m
        record = source.record(line, m, now=0.0)
        assert record["procs"] == raw.procs


def test_keys_missing_in_a_line_stay_absent(trace):
    frames = list(ReplaySource(trace, host="h", once=True).frames())
    with_energy = [m for _, _, m in frames if "energy_mj" in m]
    assert len(with_energy) == 74
    assert "tensor_active_pct" not in frames[1][2]


def test_the_phase_label_is_kept_out_of_the_metrics(trace):
    frames = list(ReplaySource(trace, host="h", once=True).frames())
    assert all("phase" not in m and "t" not in m for _, _, m in frames)
    assert {line.phase for _, line, _ in frames} >= {"matmul", "copy", "hold", "bursty", "idle"}


def test_recorded_spacing_is_divided_by_the_speed(trace):
    frames = list(ReplaySource(trace, host="h", speed=4, once=True).frames())
    for i in (1, 50, 369):
        expected = (trace.lines[i].t - trace.lines[i - 1].t) / 4
        assert frames[i][0] == pytest.approx(expected)


def test_it_stamps_samples_with_the_current_time(small_trace):
    source = ReplaySource(Trace.load(small_trace), host="h", speed=4, once=True)
    started = time.time()
    received = play(source)
    stamps = [r["t"] for r in received]
    assert stamps[0] == pytest.approx(started, abs=0.5)
    assert stamps[-1] - stamps[0] == pytest.approx(19 * 0.2 / 4, abs=0.3)
    assert source.last_phase == "idle"


def test_looping_keeps_counters_from_running_backwards(small_trace):
    source = ReplaySource(Trace.load(small_trace), host="h", speed=1000)
    energy = [
        m["energy_mj"] for _, _, m in itertools.islice(source.frames(), 60) if "energy_mj" in m
    ]
    assert len(energy) == 12
    assert energy == sorted(energy)


def test_a_broken_trace_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"static": {"uuid": "GPU-1", "name": "x", "memory_total": 1}}\n{"t": 1}\n{oops\n'
    )
    with pytest.raises(TraceError, match="line 3: not valid JSON"):
        Trace.load(path)
