import csv
import io
import json
import zipfile

from audit_support import events_after, head_seq
from django.http import StreamingHttpResponse

from audit import chain, recording
from audit.models import AuditEvent

URL = "/api/v1/audit/export/"


def _body(response) -> str:
    assert response.status_code == 200, response.content
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response.streaming_content).decode()


def _zip(response) -> zipfile.ZipFile:
    assert response.status_code == 200, response.content
    assert isinstance(response, StreamingHttpResponse)
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def _csv_text(response) -> str:
    return _zip(response).read("events.csv").decode()


def _csv(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(_csv_text(response))))


def test_csv_has_the_columns_and_only_the_events(api, ops, events):
    events(3)
    rows = _csv(api(ops).get(URL, {"format": "csv"}))
    assert rows[0] == [*chain.FIELDS, "prev_hash", "hash"]
    assert [r[0] for r in rows[1:]] == ["1", "2", "3"]


def test_the_manifest_carries_the_signed_head_the_keys_and_the_records(api, ops, events):
    events(3)
    manifest = json.loads(_zip(api(ops).get(URL, {"format": "csv"})).read("manifest.json"))
    assert manifest["tree_head"]["tree_size"] == 3 and manifest["count"] == 3
    assert manifest["complete"] and manifest["records"] == [] and manifest["nodes"] == []
    assert "BEGIN PUBLIC KEY" in manifest["public_keys"][0]["public_key_pem"]


def test_a_filtered_manifest_lists_its_records_and_the_nodes_of_their_proofs(
    api, ops, acme, events
):
    for team in (acme, None, acme, None):
        events(1, team=team)
    manifest = json.loads(
        _zip(api(ops).get(URL, {"format": "csv", "team": acme.pk})).read("manifest.json")
    )
    assert not manifest["complete"] and [seq for seq, _ in manifest["records"]] == [1, 3]
    assert manifest["count"] == 2 and manifest["nodes"]


def test_jsonl_opens_with_the_manifest_then_the_events(api, ops, events):
    events(2)
    lines = [
        json.loads(line) for line in _body(api(ops).get(URL, {"format": "jsonl"})).splitlines()
    ]
    assert [line["type"] for line in lines] == ["manifest", "event", "event"]
    assert lines[0]["count"] == 2 and lines[0]["tree_head"]["tree_size"] == 2


def test_the_export_is_itself_audited(api, audrey, events):
    events(2)
    before = head_seq()
    response = api(audrey).get(URL, {"format": "jsonl", "action": "test.*"})
    _body(response)
    (export,) = events_after(before)
    assert (export.action, export.actor_name) == ("audit.export", "audrey")
    assert export.details["format"] == "jsonl" and export.details["filters"] == {"action": "test.*"}


def test_only_events_the_user_may_see_are_exported(api, alice, acme, globex):
    recording.record_event(actor="system", action="x.acme", team=acme)
    recording.record_event(actor="system", action="x.globex", team=globex)
    actions = [
        r[6] for r in _csv(api(alice).get(URL, {"format": "csv"}))[1:] if not r[0].startswith("#")
    ]
    assert "x.acme" in actions and "x.globex" not in actions


def test_another_teams_export_answers_404(api, alice, globex):
    assert api(alice).get(URL, {"format": "csv", "team": globex.pk}).status_code == 404


def test_a_member_is_refused_and_audited(api, bob):
    before = head_seq()
    assert api(bob).get(URL, {"format": "csv"}).status_code == 403
    assert [e.action for e in events_after(before)] == ["api.denied"]


def test_an_unknown_format_names_the_field(api, ops):
    response = api(ops).get(URL, {"format": "xlsx"})
    assert response.status_code == 400 and "format" in response.json()


def test_cells_that_a_spreadsheet_would_run_are_escaped(api, ops):
    recording.record_event(
        actor='=HYPERLINK("http://x")', action="@SUM(A1)", target_type="+cmd", target_id="-1"
    )
    row = next(r for r in _csv(api(ops).get(URL, {"format": "csv"}))[1:] if r[6] == "'@SUM(A1)")
    assert row[4] == '\'=HYPERLINK("http://x")' and row[7] == "'+cmd" and row[8] == "'-1"


def test_crlf_and_control_characters_stay_inside_their_cell(api, ops, client):
    client.post("/login/", {"username": "evil\r\n=1+1\x07", "password": "x"})
    body = _csv_text(api(ops).get(URL, {"format": "csv"}))
    line = next(line for line in body.split("\n") if "auth.login_failed" in line)
    assert "\\r\\n=1+1\\u0007" in line
    assert all(ch >= " " for ch in body.replace("\n", ""))


def test_exports_stream_from_a_cursor_in_chunks(api, ops, events, settings, monkeypatch):
    monkeypatch.setattr("audit.export.ROWS_PER_CHUNK", 10)
    events(35)
    response = api(ops).get(URL, {"format": "jsonl"})
    chunks = list(response.streaming_content)
    assert len(chunks) >= 5  # manifest, 4 × 10 rows
    assert response["X-Audit-Event-Count"] == "35"


def test_events_written_after_the_export_started_are_not_in_it(api, ops, events):
    events(2)
    response = api(ops).get(URL, {"format": "jsonl"})
    events(3)
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert lines[0]["count"] == 2 and len(lines) == 3
    assert AuditEvent.objects.count() == 2 + 1 + 3  # the export's own event sits in between
