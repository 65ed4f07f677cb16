"""Each sealed batch's signed tree head is appended to a file outside the database the
moment it commits; verification checks the log against every published head, so a
rewrite or rollback of the newest records (after the last checkpoint, done with
database rights and the triggers off) is named."""

import json
import threading
from pathlib import Path

import pytest
from audit_support import rewrite_tail

from audit import checkpoints, headlog, publish, recording
from audit.models import AuditEvent, ChainHead, Checkpoint
from audit.verification import verify


def heads(settings) -> list[dict]:
    return [head for _, head in headlog.read(settings.AUDIT_HEADS_FILE)]


def test_one_head_per_committed_batch_not_per_record(committed, settings):
    committed(5)
    committed(3)
    published = heads(settings)
    assert [head["tree_size"] for head in published] == [5, 8]
    assert published[-1]["chain_hash"] == ChainHead.objects.get().hash


def test_a_head_another_process_signed_is_not_signed_again(committed, settings):
    committed(3)
    publish.forget()  # another process, which committed in the same batch: it looks next
    assert publish.publish_head() is None
    assert [head["tree_size"] for head in heads(settings)] == [3]
    committed(2)  # and it signs the next batch itself, from the empty tree
    assert [head["tree_size"] for head in heads(settings)] == [3, 5]
    assert verify().valid


def test_a_line_claiming_the_head_without_its_signature_does_not_stop_it(committed, settings):
    committed(2)
    publish.forget()
    committed(1)  # #3, published
    lines = heads(settings)
    forged = lines[-1] | {"tree_size": 4, "chain_hash": "0" * 64}
    committed(1)  # #4: the forged line is written as if another process had published it first
    real = heads(settings)[-1]
    Path(settings.AUDIT_HEADS_FILE).write_text("".join(headlog.line_of(h).decode() for h in lines)
                                               + headlog.line_of(forged | {"chain_hash": real["chain_hash"]}).decode())
    publish.forget()  # another process, which finds the claim in the file
    assert publish.publish_head()["tree_size"] == 4  # signed all the same


def test_a_fork_while_the_file_is_locked_leaves_the_lock_with_the_parent(tmp_path):
    import fcntl
    import os

    path = tmp_path / "heads.jsonl"
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    with headlog.locked(path):
        child = os.fork()
        if child == 0:  # a prefork worker that lives on: it must not keep the lock
            os.write(ready_w, b"x")  # (its copy of the locked file already closed by now)
            os.read(done_r, 1)  # until the parent has looked
            os._exit(0)
        os.read(ready_r, 1)
    fd = os.open(path, os.O_WRONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the parent lets go, the child still alive
    finally:
        os.close(fd)
        os.write(done_w, b"x")
        os.waitpid(child, 0)
        for end in (ready_r, ready_w, done_r, done_w):
            os.close(end)


def test_a_process_far_behind_starts_from_the_newest_checkpoint(committed, settings, monkeypatch):
    settings.AUDIT_CHECKPOINT_EVENTS = 4
    committed(2)
    stale = publish._edge  # this process's edge at #2
    committed(5)
    checkpoints.write_checkpoint()  # #7
    committed(1)
    publish._edge = stale  # as if the heads after #2 were signed by other processes
    read = []
    real = publish.leaf_hashes
    monkeypatch.setattr(publish, "leaf_hashes", lambda first, last: read.append((first, last)) or real(first, last))
    committed(1)
    newest = Checkpoint.objects.order_by("-seq").first().seq
    assert newest >= 7 and read == [(newest + 1, 9)]  # the leaves after it only, not #3 on
    assert heads(settings)[-1]["tree_size"] == 9
    assert verify().valid


def test_an_untouched_log_verifies_against_its_heads(committed):
    committed(4)
    committed(2)
    checkpoints.write_checkpoint()
    committed(3)
    report = verify()
    assert report.valid, report.reason


def test_rewriting_the_newest_records_is_named(committed, tamper):
    committed(5)
    checkpoints.write_checkpoint()
    committed(3)  # #6..#8: after the last checkpoint
    rewrite_tail(tamper, 7, "UPDATE audit_auditevent SET details = '{\"i\": 99}' WHERE seq = 7")
    report = verify()
    assert not report.valid
    assert report.reason.startswith("rewritten: the log's first 8 events do not match the tree head published")
    assert "#6..#8" in report.reason


def test_rolling_back_the_newest_records_is_named(committed, tamper):
    committed(5)
    checkpoints.write_checkpoint()
    committed(3)
    tamper("DELETE FROM audit_auditevent WHERE seq > 6")
    tamper("UPDATE audit_chainhead SET seq = 6, hash = (SELECT hash FROM audit_auditevent WHERE seq = 6)")
    report = verify()
    assert not report.valid
    assert report.first_broken_seq == 7
    assert report.reason.startswith("rollback: tree head #8 was published at")


def test_forging_a_record_in_place_of_the_newest_is_named(committed, tamper):
    committed(4)
    rewrite_tail(tamper, 4, "UPDATE audit_auditevent SET action = 'nothing.happened', actor_name = '' WHERE seq = 4")
    assert verify().reason.startswith("rewritten: the log's first 4 events")


def test_the_next_head_signed_on_a_forgery_does_not_hide_it(committed, tamper):
    committed(5)
    rewrite_tail(tamper, 5, "UPDATE audit_auditevent SET details = '{\"i\": 7}' WHERE seq = 5")
    publish.forget()  # a restarted server, which reads the forged records
    committed(2)
    assert verify().reason.startswith("rewritten: the log's first 5 events")


def test_a_head_line_edited_in_the_file_fails_its_signature(committed, settings):
    committed(2)
    path = settings.AUDIT_HEADS_FILE
    head = json.loads(open(path).read())
    head["root"] = "0" * 64
    open(path, "w").write(json.dumps(head) + "\n")
    assert "bad signature" in verify().reason


def test_no_file_no_check(committed, settings, tamper):
    settings.AUDIT_HEADS_FILE = ""
    committed(3)
    rewrite_tail(tamper, 3, "UPDATE audit_auditevent SET details = '{\"i\": 5}' WHERE seq = 3")
    assert verify().valid  # the window this file closes: nothing but checkpoints pins the tail



@pytest.mark.django_db(transaction=True)
def test_the_sealer_thread_publishes_after_the_commit(settings):
    from django.db import transaction

    from audit.sealer import sealer

    settings.AUDIT_PUBLISH_IN_THREAD = True
    try:
        with transaction.atomic():
            for i in range(3):
                recording.record_event(actor="system", action="test.event", details={"i": i})
        for _ in range(500):  # the thread runs on its own; wait for its head
            if heads(settings):
                break
            threading.Event().wait(0.01)
    finally:
        sealer.stop()
    assert heads(settings)[-1]["tree_size"] == 3
    assert verify().valid


def test_the_next_checkpoint_does_not_sign_a_rewritten_tail(committed, tamper):
    committed(5)
    checkpoints.write_checkpoint()
    committed(3)
    rewrite_tail(tamper, 7, "UPDATE audit_auditevent SET details = '{\"i\": 42}' WHERE seq = 7")
    assert checkpoints.write_checkpoint() is None
    event = AuditEvent.objects.get(action="audit.tamper")
    assert event.details["first_broken_seq"] == 6 and event.details["reason"].startswith("rewritten: events #6..#8")


def test_a_line_that_fails_its_signature_is_passed_over_by_the_checkpoint(committed, settings):
    committed(3)
    forged = heads(settings)[-1] | {"tree_size": 99}  # claims a longer log; its signature no longer holds
    headlog.append(settings.AUDIT_HEADS_FILE, forged)
    checkpoint = checkpoints.write_checkpoint()
    assert checkpoint is not None and checkpoint.seq == 3
    assert not AuditEvent.objects.filter(action="audit.tamper").exists()


def test_the_next_checkpoint_does_not_sign_a_rolled_back_tail(committed, tamper):
    committed(5)
    checkpoints.write_checkpoint()
    committed(3)
    tamper("DELETE FROM audit_auditevent WHERE seq > 6")
    tamper("UPDATE audit_chainhead SET seq = 6, hash = (SELECT hash FROM audit_auditevent WHERE seq = 6)")
    assert checkpoints.write_checkpoint() is None
    assert AuditEvent.objects.get(action="audit.tamper").details["reason"].startswith("rollback: tree head #8")


def test_verify_audit_names_the_published_heads(committed, tamper, capsys):
    from django.core.management import CommandError, call_command

    committed(3)
    rewrite_tail(tamper, 3, "UPDATE audit_auditevent SET details = '{\"i\": 8}' WHERE seq = 3")
    with pytest.raises(CommandError):
        call_command("verify_audit")
    out = capsys.readouterr().out
    assert "heads published outside the database, newest #3" in out and "INVALID at #1: rewritten" in out
