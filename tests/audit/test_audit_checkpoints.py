from datetime import timedelta

from django.utils import timezone

from audit import checkpoints, merkle, signing
from audit.keys import public_keys
from audit.models import AuditEvent, Checkpoint, SigningKey
from audit.tasks import SCHEDULE
from audit.verification import verify


def _message(cp):
    return signing.head_message(
        cp.seq, cp.root, cp.hash, cp.time.isoformat(timespec="microseconds")
    )


def test_a_tree_head_is_signed_with_the_private_key_and_checks_with_the_public_one(
    events, settings
):
    *_, last = events(3)
    cp = checkpoints.write_checkpoint()
    assert (cp.seq, cp.hash) == (last.seq, last.hash)
    public = signing.public_pem(signing.load_private(settings.AUDIT_SIGNING_KEY.encode()))
    assert cp.key_id == signing.fingerprint(public)
    assert signing.verify(public, _message(cp), cp.signature)


def test_the_head_signs_the_merkle_root_of_every_event(events):
    events(5)
    cp = checkpoints.write_checkpoint()
    hashes = AuditEvent.objects.order_by("seq").values_list("hash", flat=True)
    assert cp.root == merkle.root_of(merkle.event_leaf(h) for h in hashes).hex()


def test_the_next_head_extends_the_last_one(events):
    events(3)
    checkpoints.write_checkpoint()
    events(4)
    cp = checkpoints.write_checkpoint()
    hashes = AuditEvent.objects.order_by("seq").values_list("hash", flat=True)
    assert cp.root == merkle.root_of(merkle.event_leaf(h) for h in hashes).hex()


def test_no_private_key_is_stored(events, settings):
    events(1)
    checkpoints.write_checkpoint()
    stored = str(list(Checkpoint.objects.values())) + str(list(SigningKey.objects.values()))
    assert "PRIVATE" not in stored and settings.AUDIT_SIGNING_KEY.splitlines()[1] not in stored


def test_nothing_new_means_no_new_checkpoint(events):
    events(2)
    checkpoints.write_checkpoint()
    assert checkpoints.write_checkpoint() is None
    assert Checkpoint.objects.count() == 1


def test_a_broken_tail_is_never_signed_and_is_recorded(events, tamper):
    events(3)
    tamper("UPDATE audit_auditevent SET action = 'x' WHERE seq = 2")
    assert checkpoints.write_checkpoint() is None
    alarm = AuditEvent.objects.get(action="audit.tamper")
    assert alarm.outcome == "failure" and alarm.details["first_broken_seq"] == 2
    checkpoints.write_checkpoint()
    assert AuditEvent.objects.filter(action="audit.tamper").count() == 1  # once per break


def test_a_rotated_key_keeps_the_old_heads_valid(events, settings):
    events(2)
    old = checkpoints.write_checkpoint()
    settings.AUDIT_SIGNING_KEY = signing.new_private_pem().decode()
    events(2)
    new = checkpoints.write_checkpoint()
    assert new.key_id != old.key_id
    listed = public_keys()
    assert listed[old.key_id].valid_until is not None and listed[new.key_id].valid_until is None
    assert verify().valid


def test_a_head_dated_after_its_key_was_retired_fails(events, settings, tamper):
    events(2)
    old = checkpoints.write_checkpoint()
    settings.AUDIT_SIGNING_KEY = signing.new_private_pem().decode()
    public_keys()  # the new key is listed, the old one retired
    later = timezone.now() + timedelta(hours=1)
    tamper("UPDATE audit_checkpoint SET time = %s WHERE seq = %s", [later, old.seq])
    assert verify().reason.startswith("bad signature")


def test_checkpoints_are_written_every_minute():
    seconds, path = SCHEDULE["audit-checkpoint"]
    assert path == "audit.tasks.write_checkpoint" and seconds <= 60


def test_a_head_is_signed_every_so_many_events(
    events, settings, django_capture_on_commit_callbacks
):
    settings.AUDIT_CHECKPOINT_EVENTS = 4
    with django_capture_on_commit_callbacks(execute=True):
        events(3)
    assert not Checkpoint.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        events(1)
    assert Checkpoint.objects.get().seq == 4


def test_a_chain_head_rolled_back_behind_the_newest_head_is_recorded(events, tamper):
    events(5)
    checkpoints.write_checkpoint()
    tamper("DELETE FROM audit_auditevent WHERE seq > 3")
    tamper(
        "UPDATE audit_chainhead SET seq = 3, hash = (SELECT hash FROM audit_auditevent WHERE seq = 3)"
    )
    assert checkpoints.write_checkpoint() is None
    alarm = AuditEvent.objects.get(action="audit.tamper")
    assert "missing tail" in alarm.details["reason"] and alarm.details["first_broken_seq"] == 4


def test_an_edit_after_the_newest_head_is_caught_by_the_next_tick(events, tamper):
    events(3)
    checkpoints.write_checkpoint()
    events(3)
    tamper("UPDATE audit_auditevent SET actor_name = 'nobody' WHERE seq = 5")
    assert checkpoints.write_checkpoint() is None
    assert AuditEvent.objects.get(action="audit.tamper").details["first_broken_seq"] == 5
