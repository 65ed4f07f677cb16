"""The action table, role by role: alice (Acme admin), bob (Acme member), audrey (Acme
and Globex auditor), charlie (Globex admin: another team) and ops (operator)."""

from types import SimpleNamespace

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.template import Context, Template
from django.views import View
from rest_framework.test import APIClient

from console import policy

# action: may (admin, member, auditor) of the team do it there?
TABLE = {
    "signed_in": (True, True, True),
    "fleet.view": (False, False, False),
    "fleet.operate": (False, False, False),
    "billing.operate": (False, False, False),
    "accounts.manage": (False, False, False),
    "team.read": (True, True, True),
    "team.write": (True, True, False),
    "team.admin": (True, False, False),
    "costs.read": (True, True, True),
    "billing.read": (True, False, True),
    "billing.manage": (True, False, False),
    "audit.read": (True, False, True),
    "alert.act": (True, True, False),
    "alert.configure": (True, False, False),
    "image.manage": (True, True, False),
    "savings.manage": (True, False, False),
}


def test_the_table_is_the_policys():
    assert set(TABLE) == set(policy.ACTIONS)


@pytest.mark.parametrize("action", sorted(TABLE))
def test_each_role_in_its_team(action, acme, alice, bob, audrey):
    assert (
        policy.may(alice, action, acme),
        policy.may(bob, action, acme),
        policy.may(audrey, action, acme),
    ) == TABLE[action]


@pytest.mark.parametrize("action", sorted(set(TABLE) - {"signed_in"}))
def test_another_teams_admin_may_nothing_there(action, acme, charlie):
    assert not policy.may(charlie, action, acme)


@pytest.mark.parametrize("action", sorted(TABLE))
def test_an_operator_may_everything(action, acme, ops):
    assert policy.may(ops, action, acme)
    assert policy.may(ops, action, policy.FLEET)


@pytest.mark.parametrize("action", sorted(TABLE))
def test_nobody_signed_in_may_nothing(action, acme):
    assert not policy.may(AnonymousUser(), action, acme)


def test_an_object_stands_for_its_team(acme, globex, bob):
    assert policy.may(bob, "team.write", SimpleNamespace(team_id=acme.pk))
    assert not policy.may(bob, "team.write", SimpleNamespace(team_id=globex.pk))
    assert policy.may(bob, "team.write", SimpleNamespace(team=acme))


def test_an_object_of_no_team_is_the_operators(alice, ops):
    fleet_alert = SimpleNamespace(team_id=None)
    assert not policy.may(alice, "alert.act", fleet_alert)
    assert policy.may(ops, "alert.act", fleet_alert)


def test_no_target_asks_about_any_team(alice, bob, audrey, charlie):
    assert policy.may(charlie, "team.admin")
    assert not policy.may(bob, "team.admin")
    assert policy.may(audrey, "audit.read")
    assert not policy.may(audrey, "team.write")


def test_a_staff_token_limited_to_teams_is_no_operator(acme, ops):
    ops.token_team_ids = [acme.pk]
    assert not policy.may(ops, "fleet.view")
    assert not policy.may(ops, "team.read", acme)


def test_a_member_token_limited_to_another_team_reaches_nothing_here(acme, globex, bob):
    bob.token_team_ids = [globex.pk]
    assert not policy.may(bob, "team.write", acme)


def test_a_deactivated_user_may_nothing(acme, alice):
    alice.is_active = False
    assert not policy.may(alice, "team.read", acme)


def test_require_raises_with_the_tables_words_or_the_callers(acme, bob):
    with pytest.raises(PermissionDenied, match="Only the team's admins"):
        policy.require(bob, "team.admin", acme)
    with pytest.raises(PermissionDenied, match="^Not you$"):
        policy.require(bob, "team.admin", acme, "Not you")


def test_permitted_teams_lists_where_the_role_allows(acme, globex, bob, audrey, ops):
    assert policy.permitted_teams(bob, "alert.act") == {acme.pk}
    assert policy.permitted_teams(audrey, "alert.act") == set()
    assert policy.permitted_teams(audrey, "audit.read") == {acme.pk, globex.pk}
    assert policy.permitted_teams(ops, "alert.act") is None


def test_templates_ask_the_same_table(acme, bob, ops):
    template = Template(
        '{% load policy %}{% if user|may:"fleet.operate" %}op{% endif %}'
        '{% may_on user "team.write" team as w %}{% if w %}w{% endif %}'
    )
    assert template.render(Context({"user": bob, "team": acme})) == "w"
    assert template.render(Context({"user": ops, "team": acme})) == "opw"


def test_pages_send_the_signed_out_to_sign_in_and_refuse_the_rest(client, bob, ops):
    assert client.get("/hosts/").status_code == 302
    client.force_login(bob)
    assert client.get("/hosts/").status_code == 403
    client.force_login(ops)
    assert client.get("/hosts/").status_code == 200


def test_a_class_view_asks_the_policy(rf, bob, ops):
    class Fleet(policy.PolicyRequiredMixin, View):
        policy_action = "fleet.view"

        def get(self, request):
            return HttpResponse("ok")

    request = rf.get("/")
    request.user = bob
    with pytest.raises(PermissionDenied):
        Fleet.as_view()(request)
    request.user = ops
    assert Fleet.as_view()(request).status_code == 200


def test_the_api_refuses_with_the_tables_words(bob):
    client = APIClient()
    client.force_authenticate(bob)
    answer = client.get("/api/v1/hosts/")
    assert answer.status_code == 403
    assert answer.json()["detail"] == policy.denial("fleet.view")
