"""The frames the server sends to the agent: typed both ends, same bytes as before."""

import json

import msgspec
import pytest

from agent import protocol as p


def _old(frame: dict) -> str:
    return json.dumps(frame, separators=(",", ":"))


def test_welcome_ack_and_error_keep_their_bytes():
    welcome = p.Welcome(v=1, host="h1", server_time=1764915000.25, registered=["GPU-a"], vanished=[])
    assert p.encode(welcome) == _old({"type": "welcome", "v": 1, "host": "h1", "server_time": 1764915000.25,
                                      "registered": ["GPU-a"], "vanished": []})
    assert p.encode(p.Ack(boot_id="b" * 32, seq=9)) == _old({"type": "ack", "boot_id": "b" * 32, "seq": 9})
    assert p.encode(p.Error(code="bad_field", message="héllo")) == _old(
        {"type": "error", "code": "bad_field", "message": "héllo"})
    assert p.encode(p.Error(code="bad_field", message="m", boot_id="b" * 32, seq=3)) == _old(
        {"type": "error", "code": "bad_field", "message": "m", "boot_id": "b" * 32, "seq": 3})


def test_the_agent_reads_each_server_frame_as_its_struct():
    assert p.parse_server_frame('{"type":"ack","boot_id":"x","seq":4}') == p.Ack(boot_id="x", seq=4)
    welcome = p.parse_server_frame('{"type":"welcome","v":1,"server_time":5}')
    assert welcome.v == 1 and welcome.server_time == 5.0 and welcome.registered == []


@pytest.mark.parametrize("text", ['{"type":"ack","boot_id":"x","seq":true}', '{"type":"ack","seq":1}',
                                  '{"type":"ack","boot_id":"x","seq":-1}'])
def test_a_malformed_ack_is_not_an_ack(text):
    with pytest.raises(msgspec.ValidationError):
        p.parse_server_frame(text)


def test_the_type_of_a_frame_from_a_newer_server_is_read_without_its_fields():
    assert p.server_frame_type('{"type":"shiny","x":[1,2]}') == "shiny"
    assert p.server_frame_type("[1]") is None
    assert p.server_frame_type(b"{}") is None
