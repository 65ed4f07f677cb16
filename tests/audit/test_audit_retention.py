from datetime import timedelta

import pytest
from django.utils import timezone

from audit import checkpoints, offline_verify, retention, signing
from audit.models import AuditEvent, Checkpoint
from audit.tasks import SCHEDULE
from audit.verification import verify


@pytest.fixture(autouse=True)
def _archive_dir(settings, tmp_path):
    settings.AUDIT_ARCHIVE_DIR = str(tmp_path / "audit-archive")


@pytest.fixture
def aged(events, monkeypatch):
    """``n`` events recorded ``days`` ago, then a checkpoint signed at that time."""

    def _aged(n, days):
        then = timezone.now() - timedelta(days=days)
        monkeypatch.setattr(timezone, "now", lambda: then)
        made = events(n)
        checkpoints.write_checkpoint(now=then)
        monkeypatch.undo()
        return made

    return _aged


def test_old_events_go_up_to_a_signed_checkpoint(aged, events, settings):
    settings.AUDIT_RETENTION_DAYS = 365
    aged(4, days=400)
    aged(3, days=10)
    assert retention.apply_retention() == 4
    assert AuditEvent.objects.order_by("seq").values_list("seq", flat=True).first() == 5


def test_the_chain_still_verifies_from_the_checkpoint(aged, settings):
    settings.AUDIT_RETENTION_DAYS = 365
    aged(4, days=400)
    aged(3, days=10)
    retention.apply_retention()
    report = verify()
    assert report.valid, report.lines()
    assert report.first_seq == 5


def test_nothing_younger_than_180_days_goes_whatever_the_setting(aged, settings):
    settings.AUDIT_RETENTION_DAYS = 30
    aged(3, days=100)
    assert retention.apply_retention() == 0
    assert AuditEvent.objects.count() == 3


def test_without_an_old_checkpoint_nothing_goes(events, monkeypatch, settings):
    settings.AUDIT_RETENTION_DAYS = 180
    then = timezone.now() - timedelta(days=400)
    monkeypatch.setattr(timezone, "now", lambda: then)
    events(3)
    monkeypatch.undo()
    assert retention.apply_retention() == 0


def test_retention_is_itself_audited(aged, settings):
    settings.AUDIT_RETENTION_DAYS = 365
    aged(4, days=400)
    retention.apply_retention()
    event = AuditEvent.objects.get(action="audit.retention")
    assert event.details["deleted"] == 4 and event.details["through_seq"] == 4


def test_deleting_the_old_head_without_its_checkpoint_is_caught(aged, tamper):
    aged(4, days=400)
    aged(2, days=1)
    tamper("DELETE FROM audit_auditevent WHERE seq <= 2")
    report = verify()
    assert report.first_broken_seq == 3 and "missing head" in report.reason


def test_retention_runs_daily():
    assert SCHEDULE["audit-retention"] == (86_400, "audit.tasks.apply_retention")


def test_checkpoints_survive_retention(aged, settings):
    settings.AUDIT_RETENTION_DAYS = 365
    aged(4, days=400)
    retention.apply_retention()
    assert Checkpoint.objects.filter(seq=4).exists()


def test_old_events_are_archived_in_a_bundle_that_verifies_offline_before_they_go(
    aged, settings, tmp_path, capsys
):
    settings.AUDIT_RETENTION_DAYS = 365
    settings.AUDIT_ARCHIVE_DIR = str(tmp_path / "archive")
    aged(4, days=400)
    aged(3, days=10)
    retention.apply_retention()
    (archive,) = (tmp_path / "archive").iterdir()
    assert archive.name == "audit-archive-1-4.jsonl"
    key = tmp_path / "audit.pem"
    key.write_text(signing.public_pem(signing.load_private(settings.AUDIT_SIGNING_KEY.encode())))
    assert offline_verify.main([str(archive), "--public-key", str(key)]) == 0
    assert (
        "summary: valid: 4 events (#1..#4), the signed root rebuilt from all 4 records"
        in capsys.readouterr().out
    )
    event = AuditEvent.objects.get(action="audit.retention")
    assert event.details["archive"] == archive.name and len(event.details["archive_sha256"]) == 64


def test_a_second_archive_continues_from_the_first(aged, settings, tmp_path, monkeypatch):
    settings.AUDIT_RETENTION_DAYS = 365
    settings.AUDIT_ARCHIVE_DIR = str(tmp_path)
    aged(4, days=500)
    aged(3, days=400)
    retention.apply_retention(batch=4)
    retention.apply_retention()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["audit-archive-1-4.jsonl", "audit-archive-5-7.jsonl"]
    second = offline_verify.verify_bundle(str(tmp_path / names[1]))
    assert second.ok and second.proofs_checked == 3, second.problems
    assert verify().valid


def test_nothing_goes_when_the_archive_cannot_be_written(aged, settings, tmp_path):
    settings.AUDIT_RETENTION_DAYS = 365
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    settings.AUDIT_ARCHIVE_DIR = str(blocker)
    aged(4, days=400)
    with pytest.raises(OSError):
        retention.apply_retention()
    assert AuditEvent.objects.count() == 4
