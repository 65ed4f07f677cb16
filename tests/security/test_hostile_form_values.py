"""Values a form sends that no field can take — other scripts' digits, ids past a
bigint, 5,000 digits — are a 400 or 404 naming the problem, never a server error, and
nothing is changed."""

import pytest
from django.test import Client

from console.models import ApiToken, Membership

PAST_BIGINT = [str(2**63), str(2**64), "9" * 20]


def _client(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("body", [{"action": "role", "membership": "²", "role": "member"},
                                  {"action": "remove", "membership": "١٢"},
                                  {"action": "cancel", "invitation": "9" * 20},
                                  {"action": "remove", "membership": "1" * 5000}])
def test_team_actions_on_no_such_row_are_not_found(alice, bob, acme, body):
    assert _client(alice).post("/team/", body).status_code == 404
    assert Membership.objects.filter(user=bob, team=acme).exists()


@pytest.mark.parametrize("value", ["1" * 5000, "²", "0", ""])
def test_revoking_a_token_by_anything_but_its_id_is_refused(alice, value):
    assert _client(alice).post("/account/tokens/", {"revoke": value}).status_code == 400


@pytest.mark.parametrize("value", PAST_BIGINT + ["-1", "²"])
def test_a_token_for_teams_past_a_bigint_is_named_on_the_form(alice, acme, value):
    response = _client(alice).post("/account/tokens/", {"name": "ci", "scopes": "read", "days": "30", "teams": value})
    assert response.status_code in (200, 400) and response.context["form"].errors["teams"]
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("value", PAST_BIGINT)
def test_a_launch_with_groups_past_a_bigint_is_named_on_the_form(fleet, bob, acme, value):
    response = _client(bob).post("/instances/new/", {
        "team": acme.pk, "name": "web", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand",
        "security_groups": [value]})
    assert response.status_code in (200, 400) and response.context["form"].errors["security_groups"]
