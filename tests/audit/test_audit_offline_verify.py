from audit import offline_verify

URL = "/api/v1/audit/export/"


def _export(api, user, tmp_path, fmt="jsonl", **filters):
    response = api(user).get(URL, {"format": fmt, **filters})
    path = tmp_path / f"export.{fmt}"
    path.write_bytes(b"".join(response.streaming_content))
    return path


def _run(path, monkeypatch, capsys, key):
    monkeypatch.setenv("AUDIT_SIGNING_KEY", key)
    code = offline_verify.main([str(path)])
    return code, capsys.readouterr().out


def test_a_full_jsonl_export_verifies_offline(
    api, ops, events, tmp_path, monkeypatch, capsys, settings
):
    events(5)
    code, out = _run(_export(api, ops, tmp_path), monkeypatch, capsys, settings.AUDIT_SIGNING_KEY)
    assert code == 0 and "summary: valid: 5 events (#1..#5), 4 links checked, checkpoint #5" in out


def test_a_csv_export_verifies_offline(api, ops, events, tmp_path, monkeypatch, capsys, settings):
    events(3, target_type="=formula")
    code, out = _run(
        _export(api, ops, tmp_path, "csv"), monkeypatch, capsys, settings.AUDIT_SIGNING_KEY
    )
    assert code == 0, out


def test_an_edited_line_is_named(api, ops, events, tmp_path, monkeypatch, capsys, settings):
    events(4)
    path = _export(api, ops, tmp_path)
    path.write_text(path.read_text().replace('"details":{"i":2}', '"details":{"i":7}'))
    code, out = _run(path, monkeypatch, capsys, settings.AUDIT_SIGNING_KEY)
    assert code == 1 and "INVALID #3: hash mismatch" in out


def test_a_truncated_file_is_caught(api, ops, events, tmp_path, monkeypatch, capsys, settings):
    events(4)
    path = _export(api, ops, tmp_path)
    path.write_text("\n".join(path.read_text().splitlines()[:3]) + "\n")
    code, out = _run(path, monkeypatch, capsys, settings.AUDIT_SIGNING_KEY)
    assert code == 1 and "truncated" in out


def test_the_wrong_key_fails_the_signature(api, ops, events, tmp_path, monkeypatch, capsys):
    events(2)
    code, out = _run(_export(api, ops, tmp_path), monkeypatch, capsys, "some-other-key")
    assert code == 1 and "bad signature" in out


def test_a_filtered_export_says_what_it_cannot_prove(
    api, ops, events, acme, tmp_path, monkeypatch, capsys, settings
):
    for team in (acme, None, acme, None):
        events(1, team=team)
    code, out = _run(
        _export(api, ops, tmp_path, team=acme.pk), monkeypatch, capsys, settings.AUDIT_SIGNING_KEY
    )
    assert code == 0 and "filtered export" in out
