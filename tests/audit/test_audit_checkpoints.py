from audit import chain, services
from audit.models import Checkpoint
from audit.tasks import SCHEDULE


def test_a_checkpoint_signs_the_head_with_the_key_from_settings(events, settings):
    *_, last = events(3)
    cp = services.write_checkpoint()
    assert (cp.seq, cp.hash) == (last.seq, last.hash)
    assert chain.signature_ok(
        settings.AUDIT_SIGNING_KEY, cp.seq, cp.hash, chain.iso_time(cp.time), cp.signature
    )


def test_the_key_itself_is_not_stored(events, settings):
    events(1)
    cp = services.write_checkpoint()
    assert settings.AUDIT_SIGNING_KEY not in str(vars(cp))
    assert cp.key_id == chain.key_id(settings.AUDIT_SIGNING_KEY)


def test_nothing_new_means_no_new_checkpoint(events):
    events(2)
    services.write_checkpoint()
    assert services.write_checkpoint() is None
    assert Checkpoint.objects.count() == 1


def test_a_broken_tail_is_never_signed(events, tamper):
    events(3)
    tamper("UPDATE audit_auditevent SET action = 'x' WHERE seq = 2")
    assert services.write_checkpoint() is None


def test_checkpoints_are_written_on_a_schedule():
    seconds, path = SCHEDULE["audit-checkpoint"]
    assert path == "audit.tasks.write_checkpoint" and seconds <= 3600
