"""/hosts/<id>/tokens/: operators issue (shown once) and revoke a host's agent tokens."""

import pytest

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


@pytest.mark.parametrize("action", ["revoke", "rotate"])
@pytest.mark.parametrize("value", ["", "abc", "²", "1e999", "9" * 20, "1" * 5000])
def test_a_token_named_by_anything_but_its_id_is_not_found(client, ops, tokens, fleet, action, value):
    client.force_login(ops)
    host = fleet["hosts"]["h100-a"]
    assert client.post(f"/hosts/{host.pk}/tokens/", {action: value}).status_code == 404
    assert not HostToken.objects.filter(revoked_at__isnull=False).exists()
