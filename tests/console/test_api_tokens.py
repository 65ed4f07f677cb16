from console.models import ApiToken, hash_secret


def obtain(api, username="bob", password="demo-password"):
    return api().post("/api/v1/auth/token/", {"username": username, "password": password})


def test_it_issues_a_token_for_good_credentials(api, bob):
    response = obtain(api)
    assert response.status_code == 201
    assert response.json()["token"].startswith("gpc_")


def test_only_the_hash_is_stored(api, bob):
    raw = obtain(api).json()["token"]
    token = ApiToken.objects.get()
    assert token.key_hash == hash_secret(raw)
    assert raw not in (token.key_hash, token.prefix)


def test_the_token_authenticates(api, bob, acme_instance):
    raw = obtain(api).json()["token"]
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert client.get("/api/v1/instances/").json()["count"] == 1


def test_bearer_works_too(api, bob):
    raw = obtain(api).json()["token"]
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/teams/").status_code == 200


def test_a_revoked_token_is_refused(api, bob):
    raw = obtain(api).json()["token"]
    token = ApiToken.objects.get()
    assert api(bob).post(f"/api/v1/auth/tokens/{token.pk}/revoke/").json()["revoked_at"]
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert client.get("/api/v1/teams/").status_code == 401


def test_wrong_password_is_a_400_without_a_token(api, bob):
    response = obtain(api, password="nope")
    assert response.status_code == 400
    assert not ApiToken.objects.exists()


def test_missing_fields_are_named(api, bob):
    response = api().post("/api/v1/auth/token/", {"username": "bob"})
    assert "password" in response.json()


def test_charlie_cannot_revoke_bobs_token(api, bob, charlie):
    obtain(api)
    token = ApiToken.objects.get()
    assert api(charlie).post(f"/api/v1/auth/tokens/{token.pk}/revoke/").status_code == 404


def test_token_login_is_throttled(api, bob, settings):
    statuses = {obtain(api, password="wrong").status_code for _ in range(12)}
    assert 429 in statuses


def test_garbage_token_is_401(api, bob):
    client = api()
    client.credentials(HTTP_AUTHORIZATION="Token gpc_garbage")
    assert client.get("/api/v1/teams/").status_code == 401
