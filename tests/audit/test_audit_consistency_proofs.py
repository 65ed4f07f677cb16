import json

from audit import checkpoints, offline_verify

URL = "/api/v1/audit/consistency/"


def _heads(events, *sizes):
    done = 0
    for size in sizes:
        events(size - done)
        done = size
        checkpoints.write_checkpoint()


def test_a_later_head_is_proved_to_extend_an_earlier_one_offline(
    api, audrey, events, tmp_path, capsys
):
    _heads(events, 3, 7, 12)
    response = api(audrey).get(URL, {"first": 3, "second": 12})
    assert response.status_code == 200
    path = tmp_path / "heads.json"
    path.write_text(json.dumps(response.json()))
    code = offline_verify.main([str(path), "--consistency"])
    out = capsys.readouterr().out
    assert code == 0 and "summary: valid: consistency tree head #12" in out, out


def test_a_rewritten_history_fails_the_consistency_check(api, audrey, events, tmp_path, capsys):
    _heads(events, 3, 8)
    body = api(audrey).get(URL, {"first": 3}).json()
    body["proof"][0] = "00" * 32
    path = tmp_path / "heads.json"
    path.write_text(json.dumps(body))
    assert offline_verify.main([str(path), "--consistency"]) == 1
    assert "does not extend #3" in capsys.readouterr().out


def test_sizes_without_a_signed_head_answer_400(api, audrey, events):
    _heads(events, 3)
    response = api(audrey).get(URL, {"first": 2})
    assert response.status_code == 400 and "no signed tree head of size 2" in str(response.json())
    assert api(audrey).get(URL, {"first": "x"}).status_code == 400
    assert api(audrey).get(URL).status_code == 400


def test_a_member_is_refused(api, bob):
    assert api(bob).get(URL, {"first": 1}).status_code == 403
