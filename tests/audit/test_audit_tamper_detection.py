"""Tampering done as a database superuser would (triggers off): verification names it."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from audit import chain, checkpoints, hashing
from audit.models import AuditEvent
from audit.verification import verify


def test_an_untouched_log_verifies(events):
    events(5)
    checkpoints.write_checkpoint()
    report = verify()
    assert report.valid and report.checked == 5


def test_editing_one_record_names_it(events, tamper):
    events(6)
    tamper("UPDATE audit_auditevent SET action = 'innocent.thing' WHERE seq = 4")
    report = verify()
    assert report.first_broken_seq == 4
    assert report.reason.startswith("hash mismatch")


def test_editing_details_names_the_record(events, tamper):
    events(3)
    tamper("""UPDATE audit_auditevent SET details = '{"i": 99}' WHERE seq = 2""")
    assert verify().first_broken_seq == 2


def test_deleting_the_last_rows_is_caught_by_the_checkpoint(events, tamper):
    events(10)
    checkpoints.write_checkpoint()
    tamper("DELETE FROM audit_auditevent WHERE seq > 7")
    tamper(
        "UPDATE audit_chainhead SET seq = 7, hash = (SELECT hash FROM audit_auditevent WHERE seq = 7)"
    )
    report = verify()
    assert not report.valid
    assert report.first_broken_seq == 8 and "missing tail" in report.reason


def test_swapping_two_records_is_a_reorder(events, tamper):
    events(6)
    tamper("UPDATE audit_auditevent SET seq = -3 WHERE seq = 3")
    tamper("UPDATE audit_auditevent SET seq = 3 WHERE seq = 4")
    tamper("UPDATE audit_auditevent SET seq = 4 WHERE seq = -3")
    report = verify()
    assert report.first_broken_seq == 3 and report.reason.startswith("reorder")


def test_deleting_a_record_in_the_middle_is_a_gap(events, tamper):
    events(5)
    tamper("DELETE FROM audit_auditevent WHERE seq = 3")
    report = verify()
    assert report.first_broken_seq == 3 and report.reason.startswith("gap")


def test_rewriting_the_whole_chain_fails_the_signed_checkpoint(events, tamper):
    events(5)
    checkpoints.write_checkpoint()
    tamper("UPDATE audit_auditevent SET actor_name = 'nobody' WHERE seq = 2")
    prev = chain.GENESIS_HASH
    for event in AuditEvent.objects.order_by("seq"):  # recompute every hash after the edit
        digest = hashing.chain_hash(event, prev)
        tamper(
            "UPDATE audit_auditevent SET prev_hash = %s, hash = %s WHERE seq = %s",
            [prev, digest, event.seq],
        )
        prev = digest
    tamper("UPDATE audit_chainhead SET hash = %s", [prev])
    report = verify()
    assert report.first_broken_seq == 5 and report.reason.startswith("checkpoint mismatch")


def test_a_forged_checkpoint_signature_is_caught(events, tamper):
    events(3)
    checkpoints.write_checkpoint()
    tamper("UPDATE audit_checkpoint SET signature = %s", ["0" * 64])
    assert verify().reason.startswith("bad signature")


def test_a_head_signed_with_a_key_that_is_not_listed_is_caught(events, tamper):
    events(3)
    checkpoints.write_checkpoint()
    tamper("UPDATE audit_checkpoint SET key_id = %s", ["f" * 64])
    assert verify().reason.startswith("bad signature")


def test_a_bad_signing_key_setting_is_named(events, settings):
    settings.AUDIT_SIGNING_KEY = "not a key"
    events(1)
    with pytest.raises(ImproperlyConfigured, match="AUDIT_SIGNING_KEY"):
        checkpoints.write_checkpoint()


def test_a_forged_root_is_caught(events, tamper):
    events(5)
    checkpoints.write_checkpoint()
    tamper("UPDATE audit_checkpoint SET root = %s", ["ab" * 32])
    assert not verify().valid


def test_later_segments_are_judged_on_their_own(events, tamper):
    events(3)
    checkpoints.write_checkpoint()
    events(3)
    checkpoints.write_checkpoint()
    tamper("UPDATE audit_auditevent SET action = 'x' WHERE seq = 2")
    first, second = verify().segments
    assert (first.valid, first.broken_seq, second.valid) == (False, 2, True)
