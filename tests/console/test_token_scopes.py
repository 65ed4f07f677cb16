from datetime import timedelta

import pytest
from django.utils import timezone

from console import services
from console.models import ApiToken

LAUNCH = {"name": "scripted", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand"}


def token_client(api, user, **kwargs):
    kwargs.setdefault("scopes", ["read"])
    _, raw = services.create_api_token(actor=user, user=user, name="script", **kwargs)
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


def test_it_makes_a_scoped_token_through_the_api(api, bob):
    response = api(bob).post("/api/v1/auth/tokens/", {"name": "ci", "scopes": ["read"]})
    assert response.status_code == 201
    body = response.json()
    assert body["token"].startswith("gpc_") and body["scopes"] == ["read"]
    expires = timezone.datetime.fromisoformat(body["expires_at"])
    assert timedelta(days=89) < expires - timezone.now() <= timedelta(days=90)


def test_a_read_token_cannot_launch(api, bob, acme, fleet):
    client = token_client(api, bob, scopes=["read"])
    assert client.get("/api/v1/instances/").status_code == 200
    response = client.post("/api/v1/instances/", LAUNCH | {"team": acme.pk})
    assert response.status_code == 403
    assert "'write' scope" in response.json()["detail"]


def test_a_write_token_launches(api, bob, acme, fleet):
    client = token_client(api, bob, scopes=["read", "write"])
    assert client.post("/api/v1/instances/", LAUNCH | {"team": acme.pk}).status_code == 201


def test_a_write_only_token_cannot_read(api, bob, acme):
    response = token_client(api, bob, scopes=["write"]).get("/api/v1/teams/")
    assert response.status_code == 403
    assert "'read' scope" in response.json()["detail"]


def test_an_expired_token_is_401(api, bob):
    client = token_client(api, bob, expires_at=timezone.now() + timedelta(seconds=30))
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get("/api/v1/teams/")
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


def test_audit_export_needs_its_own_scope(api, audrey):
    plain = token_client(api, audrey, scopes=["read"])
    response = plain.get("/api/v1/audit/export/?format=csv")
    assert response.status_code == 403
    assert "'audit:export' scope" in response.json()["detail"]
    exporter = token_client(api, audrey, scopes=["read", "audit:export"])
    assert exporter.get("/api/v1/audit/export/?format=csv").status_code == 200


def test_a_member_cannot_hold_audit_export(api, bob):
    response = api(bob).post("/api/v1/auth/tokens/", {"name": "x", "scopes": ["audit:export"]})
    assert response.status_code == 400
    assert "audit:export" in response.json()["scopes"][0]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "x"}, "scopes"),
        ({"name": "x", "scopes": []}, "scopes"),
        ({"name": "x", "scopes": ["admin"]}, "scopes"),
        ({"name": "x", "scopes": ["read"], "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "x", "scopes": ["read"], "expires_at": "3020-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "x", "scopes": ["read"], "expires_at": "soon"}, "expires_at"),
        ({"name": "x", "scopes": ["read"], "teams": [999999]}, "teams"),
    ],
)
def test_bad_token_requests_name_the_field(api, bob, body, field):
    response = api(bob).post("/api/v1/auth/tokens/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not ApiToken.objects.exists()


def test_the_maximum_lifetime_is_a_setting(api, bob, settings):
    settings.API_TOKEN_MAX_DAYS = 7
    later = (timezone.now() + timedelta(days=8)).isoformat()
    response = api(bob).post("/api/v1/auth/tokens/", {"name": "x", "scopes": ["read"], "expires_at": later})
    assert "7 days" in response.json()["expires_at"][0]


def test_a_token_can_be_limited_to_another_teams_only(api, bob, globex):
    response = api(bob).post("/api/v1/auth/tokens/", {"name": "x", "scopes": ["read"], "teams": [globex.pk]})
    assert response.status_code == 400
    assert "teams" in response.json()


def test_a_team_limited_token_sees_that_team_only(api, audrey, acme, globex, acme_instance, globex_instance):
    client = token_client(api, audrey, teams=[globex])
    assert [t["name"] for t in client.get("/api/v1/teams/").json()["results"]] == ["Globex"]
    assert [i["name"] for i in client.get("/api/v1/instances/").json()["results"]] == ["globex-train"]
    assert client.get(f"/api/v1/instances/{acme_instance.pk}/").status_code == 404


def test_a_token_makes_no_token_wider_than_itself(api, alice):
    client = token_client(api, alice, scopes=["read", "write"])
    response = client.post("/api/v1/auth/tokens/", {"name": "x", "scopes": ["read", "write", "audit:export"]})
    assert response.status_code == 400
    assert client.post("/api/v1/auth/tokens/", {"name": "x", "scopes": ["read"]}).status_code == 201


def test_last_use_and_address_are_kept(api, bob):
    client = token_client(api, bob)
    client.get("/api/v1/teams/", REMOTE_ADDR="192.0.2.7")
    token = ApiToken.objects.get()
    assert token.last_used_at is not None
    assert token.last_used_ip == "192.0.2.7"


def test_token_creation_is_audited_with_scopes(api, bob):
    from audit.models import AuditEvent

    api(bob).post("/api/v1/auth/tokens/", {"name": "ci", "scopes": ["read"]})
    event = AuditEvent.objects.get(action="api_token.create")
    assert event.details["scopes"] == ["read"]
