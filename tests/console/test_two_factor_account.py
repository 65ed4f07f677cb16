import pytest
from twofactor_support import code, enrol, login_with_device

from audit.models import AuditEvent
from console import twofactor


@pytest.fixture(autouse=True)
def _no_throttle(settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = settings.OTP_STATIC_THROTTLE_FACTOR = 0


def test_it_enrols_from_the_account_page_with_a_qr_code(client, bob):
    client.force_login(bob)
    assert "Set up two-factor sign-in" in client.get("/account/").content.decode()
    page = client.get("/account/two-factor/enrol/").content.decode()
    assert "<svg" in page
    response = client.post("/account/two-factor/enrol/", {"code": code(twofactor.pending_device(bob))})
    assert len(response.context["codes"]) == 10
    assert twofactor.enrolled(bob)
    assert "10 recovery codes left" in client.get("/account/").content.decode()


def test_a_wrong_code_does_not_enrol(client, bob):
    client.force_login(bob)
    client.get("/account/two-factor/enrol/")
    response = client.post("/account/two-factor/enrol/", {"code": "000000"})
    assert "does not match" in response.content.decode()
    assert not twofactor.enrolled(bob)


def test_removal_needs_a_current_code_and_is_audited(client, bob):
    device, _ = enrol(bob)
    client.force_login(bob)
    client.post("/account/two-factor/", {"action": "remove", "code": "000000"})
    assert twofactor.enrolled(bob)
    client.post("/account/two-factor/", {"action": "remove", "code": code(device, steps_ahead=1)})
    assert not twofactor.enrolled(bob)
    assert AuditEvent.objects.filter(action="auth.2fa_remove", target_id=str(bob.pk)).exists()


def test_a_required_role_cannot_remove_it(client, alice, settings):
    settings.REQUIRE_2FA_ROLES = ["admin"]
    device, _ = enrol(alice)
    login_with_device(client, alice, device)
    response = client.post("/account/two-factor/", {"action": "remove", "code": code(device, steps_ahead=1)}, follow=True)
    assert "cannot be removed" in response.content.decode()
    assert twofactor.enrolled(alice)


def test_new_recovery_codes_replace_the_old(client, bob):
    device, old = enrol(bob)
    client.force_login(bob)
    response = client.post("/account/two-factor/", {"action": "codes", "code": code(device, steps_ahead=1)})
    new = response.context["codes"]
    assert len(new) == 10 and not set(new) & set(old)
    assert twofactor.verify(user=bob, code=old[0]) is None
    assert twofactor.verify(user=bob, code=new[0]) is not None


def test_an_operator_resets_a_lost_device(client, ops, alice):
    from django.test import Client

    enrol(alice)
    theirs = Client()
    theirs.force_login(alice)
    client.force_login(ops)
    response = client.post(f"/users/{alice.pk}/reset-two-factor/")
    assert response.status_code == 302
    assert not twofactor.enrolled(alice)
    assert theirs.get("/account/").status_code == 302  # signed out
    event = AuditEvent.objects.get(action="auth.2fa_reset")
    assert (event.actor_name, event.details["had_device"], event.details["signed_out"]) == ("ops", True, 1)


@pytest.mark.parametrize("who", ["alice", "bob", "audrey"])
def test_only_operators_reset(client, request, who, charlie):
    enrol(charlie)
    client.force_login(request.getfixturevalue(who))
    assert client.post(f"/users/{charlie.pk}/reset-two-factor/").status_code == 403
    assert twofactor.enrolled(charlie)


def test_a_locked_out_operator_is_reset_from_the_command_line(ops):
    from io import StringIO

    from django.core.management import CommandError, call_command

    enrol(ops)
    out = StringIO()
    call_command("reset_two_factor", "ops", stdout=out)
    assert "reset" in out.getvalue() and not twofactor.enrolled(ops)
    assert AuditEvent.objects.get(action="auth.2fa_reset").actor_name == "cli"
    with pytest.raises(CommandError, match="No user"):
        call_command("reset_two_factor", "nobody")
