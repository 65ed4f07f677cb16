"""A workload declares its precision with GPUCONSOLE_PRECISION in its environment; the
agent reads it from /proc with the process's name and sends it with the process list.
Anything but a known precision declares nothing."""

import os
import subprocess
import sys

import msgspec
import pytest
from test_procinfo import fake_proc

from agent import protocol
from agent.procinfo import declared_precision, describe


@pytest.mark.parametrize(("environ", "expected"), [
    (b"PATH=/usr/bin\0GPUCONSOLE_PRECISION=tf32\0HOME=/root\0", "tf32"),
    (b"GPUCONSOLE_PRECISION= FP8 \0", "fp8"),
    (b"GPUCONSOLE_PRECISION=int4\0", None),
    (b"GPUCONSOLE_PRECISION=\0", None),
    (b"XGPUCONSOLE_PRECISION=bf16\0", None),
    (b"PATH=/usr/bin\0", None),
    (None, None),
])
def test_it_reads_the_declaration_from_the_environment(environ, expected):
    assert declared_precision(environ) == expected


def test_a_process_with_the_variable_is_described_with_its_precision(tmp_path):
    root = fake_proc(tmp_path)
    (root / "4242" / "environ").write_bytes(b"LANG=C\0GPUCONSOLE_PRECISION=fp16\0")
    assert describe(4242, root)["precision"] == "fp16"


def test_a_process_without_it_or_out_of_reach_declares_nothing(tmp_path):
    assert "precision" not in describe(4242, fake_proc(tmp_path))  # no environ file readable


def test_it_reads_a_real_process_environment():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env=os.environ | {"GPUCONSOLE_PRECISION": "tf32"})
    try:
        assert describe(child.pid)["precision"] == "tf32"
    finally:
        child.kill()
        child.wait()


def test_the_wire_keeps_a_known_precision_and_drops_an_unknown_one():
    procs = protocol.clean_procs([{"pid": 1, "precision": "bf16"}, {"pid": 2, "precision": "int4"}])
    assert procs == [{"pid": 1, "precision": "bf16"}, {"pid": 2}]


def test_the_server_refuses_an_unknown_precision_by_name():
    record = {"seq": 1, "t": 1.8e9, "gpu": "GPU-1", "procs": [{"pid": 1, "precision": "int4"}]}
    with pytest.raises(msgspec.ValidationError, match="precision"):
        msgspec.json.decode(msgspec.json.encode(record), type=protocol.Record)
