from console.models import ApiToken


def test_it_creates_a_scoped_team_limited_token(client, audrey, globex):
    client.force_login(audrey)
    response = client.post("/account/tokens/", {"name": "reports", "scopes": ["read"], "days": "7", "teams": [globex.pk]})
    assert response.status_code == 200
    token = ApiToken.objects.get()
    assert token.scopes == ["read"] and [t.name for t in token.teams.all()] == ["Globex"]
    assert token.prefix in response.content.decode()


def test_it_shows_expiry_last_use_and_address(client, bob, api):
    client.force_login(bob)
    client.post("/account/tokens/", {"name": "ci", "scopes": ["read"], "days": "30"})
    token = ApiToken.objects.get()
    ApiToken.objects.update(last_used_ip="198.51.100.4")
    page = client.get("/account/tokens/").content.decode()
    assert "198.51.100.4" in page
    assert token.expires_at.strftime("%Y-%m-%d %H:%M") in page


def test_it_refuses_more_days_than_allowed(client, bob, settings):
    settings.API_TOKEN_MAX_DAYS = 30
    client.force_login(bob)
    response = client.post("/account/tokens/", {"name": "ci", "scopes": ["read"], "days": "31"})
    assert "30 days at most" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_a_member_cannot_pick_audit_export(client, bob):
    client.force_login(bob)
    response = client.post("/account/tokens/", {"name": "ci", "scopes": ["audit:export"], "days": "3"})
    assert "audit:export" in response.content.decode()
    assert not ApiToken.objects.exists()
