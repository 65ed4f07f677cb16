"""Single sign-on against a real OpenID Connect provider (django-oidc-provider) that
runs in its own process on a port of its own."""

import pytest
import sso_provider
from django.contrib.auth.models import User
from django.test import Client

from audit.models import AuditEvent
from console.models import ExternalIdentity, Membership

USERS = [
    {"username": "ada", "email": "ada@example.com", "verified": True, "groups": ["acme:admin", "nowhere:admin"]},
    {"username": "bob-at-idp", "email": "BOB@example.com", "verified": True, "groups": ["acme:auditor"]},
    {"username": "mallory", "email": "alice@example.com", "verified": False, "groups": ["acme:admin"]},
    {"username": "ops-at-idp", "email": "ops@example.com", "verified": True, "groups": []},
]


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    running = sso_provider.start(tmp_path_factory.mktemp("idp"), USERS)
    yield running
    sso_provider.stop(running)


@pytest.fixture(autouse=True)
def _sso_settings(settings, provider):
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_RP_CLIENT_ID = sso_provider.CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = sso_provider.CLIENT_SECRET
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.OIDC_TEAMS_CLAIM = "groups"


def sign_in(client, provider, username):
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302 and start.url.startswith(provider.issuer)
    callback = provider.authorize(provider.sign_in(username), start.url)
    return client.get(callback), callback


def signed_in_as(client):
    response = client.get("/account/")
    return response.context["user"].username if response.status_code == 200 else None


def test_the_login_page_offers_single_sign_on(client, db):
    assert 'id="sso"' in client.get("/login/").content.decode()


def test_a_new_user_is_created_with_the_team_role_from_the_claim(client, provider, acme):
    response, _ = sign_in(client, provider, "ada")
    assert response.status_code == 302 and response.url == "/"
    assert signed_in_as(client) == "ada"
    ada = User.objects.get(username="ada")
    assert ada.email == "ada@example.com" and not ada.has_usable_password()
    assert [(m.team.slug, m.role) for m in Membership.objects.filter(user=ada)] == [("acme", "admin")]
    assert ExternalIdentity.objects.get(user=ada).issuer == provider.issuer
    assert AuditEvent.objects.get(action="auth.login").details["via"] == "sso"
    assert AuditEvent.objects.filter(action="member.add", actor_name="sso").exists()


def test_an_existing_user_is_matched_by_verified_email_and_the_claim_sets_the_role(client, provider, bob, acme):
    sign_in(client, provider, "bob-at-idp")
    assert signed_in_as(client) == "bob"
    assert Membership.objects.get(user=bob, team=acme).role == "auditor"
    assert bob.check_password("demo-password")  # local passwords stay unless turned off


def test_local_passwords_can_be_turned_off(client, provider, bob, settings):
    settings.OIDC_LOCAL_PASSWORDS = False
    sign_in(client, provider, "bob-at-idp")
    bob.refresh_from_db()
    assert not bob.has_usable_password()
    refused = Client().post("/login/", {"username": "bob", "password": "demo-password"})
    assert refused.status_code == 200  # the form again, not a redirect
    assert AuditEvent.objects.filter(action="auth.local_password_disabled").count() == 1


def test_an_unverified_email_is_refused(client, provider, alice):
    response, _ = sign_in(client, provider, "mallory")
    assert response.url == "/login/?sso=failed"
    assert signed_in_as(client) is None
    assert "email_verified" in AuditEvent.objects.get(action="auth.sso_failed").details["reason"]
    assert Membership.objects.get(user=alice).role == "admin"


def test_a_forged_state_is_refused(client, provider, acme):
    start = client.get("/oidc/authenticate/")
    callback = provider.authorize(provider.sign_in("ada"), start.url)
    code = callback.split("code=")[1].split("&")[0]
    response = client.get(f"/oidc/callback/?code={code}&state=forged-by-an-attacker")
    assert response.url == "/login/?sso=failed"
    assert signed_in_as(client) is None
    assert "state" in AuditEvent.objects.get(action="auth.sso_failed").details["reason"]
    assert not User.objects.filter(username="ada").exists()


def test_a_callback_from_another_browser_is_refused(client, provider, acme):
    _, callback = sign_in(Client(), provider, "ada")  # someone else's sign-in
    response = client.get(callback)
    assert response.url == "/login/?sso=failed" and signed_in_as(client) is None


def test_a_callback_is_used_once(client, provider, acme):
    _, callback = sign_in(client, provider, "ada")
    client.post("/logout/")
    assert client.get(callback).url == "/login/?sso=failed"
    assert signed_in_as(client) is None


def test_an_operator_still_needs_the_second_factor(client, provider, ops, settings):
    settings.REQUIRE_2FA_ROLES = ["operator"]
    response, _ = sign_in(client, provider, "ops-at-idp")
    assert response.url == "/login/enrol/"
    assert signed_in_as(client) is None


def test_a_provider_that_enforces_mfa_is_trusted_where_configured(client, provider, ops, settings):
    settings.REQUIRE_2FA_ROLES = ["operator"]
    settings.OIDC_IDP_ENFORCES_MFA = True
    sign_in(client, provider, "ops-at-idp")
    assert signed_in_as(client) == "ops"


def test_sso_is_off_without_an_issuer(client, db, settings):
    settings.OIDC_ISSUER = ""
    assert client.get("/oidc/authenticate/").status_code == 404
    assert 'id="sso"' not in client.get("/login/").content.decode()


def test_a_user_not_in_the_claim_leaves_the_team(client, provider, bob, globex):
    Membership.objects.create(user=bob, team=globex, role="member")
    sign_in(client, provider, "bob-at-idp")
    assert sorted(Membership.objects.filter(user=bob).values_list("team__slug", "role")) == [("acme", "auditor")]
    assert AuditEvent.objects.filter(action="member.remove", actor_name="sso").count() == 1
