"""An auditor with only the public key verifies an exported bundle offline; one changed
byte fails verification naming the record."""

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from audit import offline_verify, signing

URL = "/api/v1/audit/export/"
ROOT = Path(__file__).resolve().parents[2]


def _export(api, user, tmp_path, fmt="jsonl", **filters):
    response = api(user).get(URL, {"format": fmt, **filters})
    assert response.status_code == 200
    path = tmp_path / response["Content-Disposition"].split('"')[1]
    path.write_bytes(b"".join(response.streaming_content))
    return path


def _public_key(api, user, tmp_path):
    path = tmp_path / "audit.pem"
    path.write_text(api(user).get("/api/v1/audit/public-key/").json()["public_key_pem"])
    return path


def _run(path, key, capsys):
    code = offline_verify.main([str(path), "--public-key", str(key)])
    return code, capsys.readouterr().out


def _edit_zip(path, old: bytes, new: bytes, member="events.csv"):
    with zipfile.ZipFile(path) as bundle:
        files = {name: bundle.read(name) for name in bundle.namelist()}
    assert old in files[member]
    head, _, tail = files[member].rpartition(old)  # the last occurrence
    files[member] = head + new + tail
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in files.items():
            bundle.writestr(name, data)


def test_a_full_jsonl_bundle_verifies_with_the_public_key(api, ops, events, tmp_path, capsys):
    events(5)
    code, out = _run(_export(api, ops, tmp_path), _public_key(api, ops, tmp_path), capsys)
    assert code == 0, out
    assert (
        "summary: valid: 5 events (#1..#5), the signed root rebuilt from all 5 records and 4 links"
        in out
    )


def test_a_filtered_export_proves_every_record_with_inclusion_proofs(
    api, audrey, acme, events, tmp_path, capsys
):
    for team in (acme, None, acme, None, None, acme, None):
        events(1, team=team)
    path = _export(api, audrey, tmp_path, "csv", team=acme.pk)
    code, out = _run(path, _public_key(api, audrey, tmp_path), capsys)
    assert code == 0, out
    assert "3 events (#1..#6), 3 inclusion proofs" in out


def test_one_changed_byte_in_a_record_names_it(api, ops, acme, events, tmp_path, capsys):
    for team in (acme, None, acme, acme):
        events(1, team=team)
    path = _export(api, ops, tmp_path, "csv", team=acme.pk)
    _edit_zip(path, b"test.event", b"test.evenT")  # one byte of the last record, #4
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 1 and "INVALID #4: hash mismatch" in out


def _rewrite(path, line, **changes):
    from audit import chain

    lines = path.read_text().splitlines()
    row = json.loads(lines[line])
    row.update(changes)
    row["hash"] = chain.row_hash(row, row["prev_hash"])
    lines[line] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    return row["seq"]


def test_a_filtered_record_rewritten_with_its_hash_is_named(
    api, ops, acme, events, tmp_path, capsys
):
    for team in (acme, None, acme, acme):
        events(1, team=team)
    path = _export(api, ops, tmp_path, team=acme.pk)
    seq = _rewrite(path, 2, action="innocent.thing")
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 1 and f"INVALID #{seq}: its hash differs from the manifest's" in out


def test_the_last_record_of_a_whole_log_rewritten_with_its_hash_is_named(
    api, ops, events, tmp_path, capsys
):
    events(4)
    path = _export(api, ops, tmp_path)
    assert _rewrite(path, 4, action="innocent.thing") == 4
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 1 and "INVALID #4: its hash differs from the signed tree head's" in out


def test_a_removed_record_is_named(api, ops, events, tmp_path, capsys):
    events(4)
    path = _export(api, ops, tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 1 and "#2: missing from the file (removed)" in out


def test_another_key_fails_the_signature(api, ops, events, tmp_path, capsys):
    events(2)
    other = tmp_path / "other.pem"
    other.write_text(signing.public_pem(signing.load_private(signing.new_private_pem())))
    code, out = _run(_export(api, ops, tmp_path), other, capsys)
    assert code == 1 and "not a trusted key" in out


def test_a_forged_manifest_node_fails_the_proofs(api, ops, acme, events, tmp_path, capsys):
    for team in (acme, None, None, acme):
        events(1, team=team)
    path = _export(api, ops, tmp_path, "csv", team=acme.pk)
    with zipfile.ZipFile(path) as bundle:
        manifest = json.loads(bundle.read("manifest.json"))
    node = manifest["nodes"][0][2]
    _edit_zip(path, node.encode(), ("0" * 64).encode(), member="manifest.json")
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 1 and "inclusion proof does not lead to the signed root" in out


def test_without_a_pinned_key_it_says_whose_key_it_trusted(api, ops, events, tmp_path, capsys):
    events(2)
    code = offline_verify.main([str(_export(api, ops, tmp_path))])
    assert code == 0 and "trusting the public keys inside the bundle" in capsys.readouterr().out


def test_the_verifier_runs_without_django(api, ops, events, tmp_path):
    events(3)
    path = _export(api, ops, tmp_path, "csv")
    key = _public_key(api, ops, tmp_path)
    code = (
        "import sys, runpy; sys.modules['django'] = None;"
        f"sys.argv = ['v', {str(path)!r}, '--public-key', {str(key)!r}];"
        "runpy.run_module('audit.offline_verify', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "summary: valid: 3 events" in done.stdout


def test_a_bundle_is_a_zip_of_plain_rows_and_a_manifest(api, ops, events, tmp_path):
    events(2)
    with zipfile.ZipFile(io.BytesIO(_export(api, ops, tmp_path, "csv").read_bytes())) as bundle:
        assert bundle.namelist() == ["events.csv", "manifest.json"]
        rows = bundle.read("events.csv").decode().splitlines()
        manifest = json.loads(bundle.read("manifest.json"))
    assert len(rows) == 3 and not any(r.startswith("#") for r in rows)
    assert manifest["tree_head"]["tree_size"] == 2 and manifest["public_keys"][0]["public_key_pem"]


def test_one_changed_byte_in_an_exported_line_names_it(api, ops, events, tmp_path, capsys):
    events(3)
    path = _export(api, ops, tmp_path)
    text = path.read_text()
    assert text.count('"details":{"i":1}') == 1
    path.write_text(text.replace('"details":{"i":1}', '"details":{"i":7}'))  # record #2
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 1 and "INVALID #2: hash mismatch" in out


def test_a_line_rewritten_by_another_tool_still_verifies(api, ops, events, tmp_path, capsys):
    events(3)
    path = _export(api, ops, tmp_path)
    lines = path.read_text().splitlines()
    lines[1:] = [json.dumps(dict(reversed(json.loads(line).items())), indent=None) for line in lines[1:]]
    path.write_text("\n".join(lines) + "\n")
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 0, out


def test_an_exported_line_holds_the_hashed_bytes_between_its_ends(api, ops, events, tmp_path):
    from audit import chain

    events(2)
    line = _export(api, ops, tmp_path).read_bytes().splitlines()[2]
    row = json.loads(line)
    assert line.startswith(b'{"type":"event","action":')
    canonical = b"{" + line[len(b'{"type":"event",') : line.index(b',"prev_hash":')] + b"}"
    assert chain.link(canonical, row["prev_hash"]) == row["hash"] == chain.row_hash(row, row["prev_hash"])
    assert "actor_role" not in row  # empty optional fields are left out, as in the canonical form


def test_windows_line_ends_and_any_changed_byte_of_a_whole_log_line(api, ops, events, tmp_path, capsys):
    events(4)
    path = _export(api, ops, tmp_path)
    original = path.read_bytes()
    path.write_bytes(original.replace(b"\n", b"\r\n"))
    assert _run(path, _public_key(api, ops, tmp_path), capsys)[0] == 0
    line = original.splitlines(keepends=True)[3]  # record #3
    start = original.index(line)
    for at in (28, line.index(b'"seq":') + 6, len(line) - 40, len(line) - 100):  # field, seq, hash, prev
        edited = bytearray(original)
        edited[start + at] = ord("7") if edited[start + at] != ord("7") else ord("8")
        path.write_bytes(bytes(edited))
        code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
        assert code == 1 and ("INVALID #3" in out or "INVALID #4" in out or "INVALID #7" in out), (at, out)


def test_a_bundle_in_the_earlier_line_form_still_verifies(api, ops, events, tmp_path, capsys):
    from audit import chain

    events(3)
    path = _export(api, ops, tmp_path)
    lines = path.read_text().splitlines()
    order = ("type", *chain.FIELDS, "prev_hash", "hash")  # format 2: seq first, every field
    for i in range(1, len(lines)):
        row = {"actor_role": "", "target_name": "", **json.loads(lines[i])}
        lines[i] = json.dumps({k: row[k] for k in order}, separators=(",", ":"), ensure_ascii=False)
    path.write_text("\n".join(lines) + "\n")
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 0, out
    assert offline_verify._exported_record(lines[1]) is not None  # the earlier fast path


def test_a_zip_with_spreadsheet_safe_cells_verifies(api, ops, events, tmp_path, capsys):
    from audit import recording

    events(2)
    recording.record_event(actor='=HYPERLINK("x")', action="@SUM(A1)", target_type="+cmd", target_id="'-1")
    events(1)
    path = _export(api, ops, tmp_path, "csv")
    code, out = _run(path, _public_key(api, ops, tmp_path), capsys)
    assert code == 0, out
    assert "4 events (#1..#4), the signed root rebuilt from all 4 records" in out
