from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from audit import checkpoints
from audit.models import AuditEvent


def _run(*args) -> str:
    out = StringIO()
    call_command("verify_audit", *args, stdout=out)
    return out.getvalue()


def test_a_valid_log_prints_each_segment_and_a_summary(events):
    events(4)
    checkpoints.write_checkpoint()
    events(2)
    lines = _run().splitlines()
    assert lines[0].startswith("segment #1..#4 ") and lines[0].endswith(": valid")
    assert "unsigned tail" in lines[1] and lines[1].endswith(": valid")
    assert lines[-1].startswith("summary: valid: 6 events")


def test_a_broken_log_exits_non_zero_and_names_the_record(events, tamper):
    events(4)
    tamper("UPDATE audit_auditevent SET target_id = '666' WHERE seq = 3")
    out = StringIO()
    with pytest.raises(CommandError) as failure:
        call_command("verify_audit", stdout=out)
    assert failure.value.returncode == 1
    assert "INVALID at #3: hash mismatch" in out.getvalue()
    assert "first broken #3" in out.getvalue().splitlines()[-1]


def test_from_and_to_take_sequence_numbers(events, tamper):
    events(6)
    tamper("UPDATE audit_auditevent SET target_id = '666' WHERE seq = 2")
    assert "summary: valid: 3 events (#3..#5)" in _run("--from", "3", "--to", "5")


def test_from_and_to_take_dates(events):
    events(3)
    assert "summary: valid: 3 events" in _run("--from", "2000-01-01", "--to", "2999-01-01T00:00:00")


def test_a_bad_bound_names_the_option(db):
    with pytest.raises(CommandError, match="--from: 'yesterday'"):
        _run("--from", "yesterday")


def test_the_run_is_itself_audited(events):
    events(1)
    _run()
    assert (
        AuditEvent.objects.filter(action="audit.verify", actor_name="verify_audit").count()
        == 1
    )
