from django.conf import settings

from audit import recording
from audit.models import AuditEvent


def _all_details_text() -> str:
    return " ".join(str(d) for d in AuditEvent.objects.values_list("details", flat=True))


def test_secret_keys_are_redacted_at_any_depth(db):
    event = recording.record_event(
        actor="system", action="x.y",
        details={"password": "hunter2", "nested": {"api_token": "t", "Authorization": "x"}, "items": [{"secret": 1}]},
    )  # fmt: skip
    assert event.details == {
        "password": "[redacted]", "nested": {"api_token": "[redacted]", "Authorization": "[redacted]"},
        "items": [{"secret": "[redacted]"}],
    }  # fmt: skip


def test_token_shaped_values_are_redacted_whatever_their_key(db):
    event = recording.record_event(
        actor="system", action="x.y", details={"note": "used gpc_abcdefghijklmnop123 today"}
    )
    assert "abcdefghijklmnop" not in str(event.details)


def test_the_signing_key_never_lands_in_details(db):
    event = recording.record_event(
        actor="system", action="x.y", details={"note": f"k={settings.AUDIT_SIGNING_KEY}"}
    )
    assert settings.AUDIT_SIGNING_KEY not in str(event.details)


def test_a_new_api_tokens_raw_key_is_never_audited(api, bob):
    raw = (
        api()
        .post("/api/v1/auth/token/", {"username": "bob", "password": "demo-password"})
        .json()["token"]
    )
    assert raw[:12] not in _all_details_text()


def test_a_failed_login_does_not_keep_the_password(client, bob):
    client.post("/login/", {"username": "bob", "password": "correct horse battery"})
    assert AuditEvent.objects.filter(action="auth.login_failed").exists()
    assert "correct horse" not in _all_details_text()
