"""/hosts/<id>/tokens/: operators issue (shown once) and revoke a host's agent tokens."""

from monitoring.models import HostToken


def test_an_operator_issues_a_token_shown_once(client, ops, fleet):
    client.force_login(ops)
    host = fleet["hosts"]["h100-a"]
    response = client.post(f"/hosts/{host.pk}/tokens/", {"name": "rack 4"})
    assert response.status_code == 200
    raw = response.context["raw"]
    assert raw.startswith("gph_") and raw in response.content.decode()
    assert raw not in client.get(f"/hosts/{host.pk}/tokens/").content.decode()
    assert HostToken.objects.get().name == "rack 4"


def test_an_operator_revokes_a_token(client, ops, tokens, fleet):
    client.force_login(ops)
    host = fleet["hosts"]["h100-a"]
    token = HostToken.objects.get(host=host)
    client.post(f"/hosts/{host.pk}/tokens/", {"revoke": token.pk})
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_a_bad_name_is_explained(client, ops, fleet):
    client.force_login(ops)
    response = client.post(f"/hosts/{fleet['hosts']['h100-a'].pk}/tokens/", {"name": "<script>"})
    assert response.context["form"].errors["name"]
    assert not HostToken.objects.exists()


def test_members_are_refused(client, alice, fleet):
    client.force_login(alice)
    assert client.get(f"/hosts/{fleet['hosts']['h100-a'].pk}/tokens/").status_code == 403
