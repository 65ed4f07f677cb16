"""The token form offers only the scopes the user may hold: a member is never offered
audit:export (and refused only after submitting it); admins and auditors are."""

import re


def offered(client, user) -> set[str]:
    client.force_login(user)
    page = client.get("/account/tokens/").content.decode()
    return set(re.findall(r'name="scopes" value="([^"]+)"', page))


def test_a_member_is_not_offered_audit_export(client, bob):
    scopes = offered(client, bob)
    assert "read" in scopes and "write" in scopes and "audit:export" not in scopes


def test_admins_and_auditors_are_offered_it(client, alice, audrey):
    assert "audit:export" in offered(client, alice)
    assert "audit:export" in offered(client, audrey)


def test_a_member_who_forges_it_gets_a_named_error_and_no_token(client, bob):
    from console.models import ApiToken

    client.force_login(bob)
    response = client.post("/account/tokens/", {"name": "x", "scopes": ["audit:export"], "days": 30})
    assert response.status_code in (200, 400)
    assert "audit:export" in response.content.decode() and not ApiToken.objects.filter(user=bob).exists()
