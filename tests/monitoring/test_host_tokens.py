"""Operators issue and revoke agent tokens; a token is shown once and stored hashed."""

import hashlib
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from instances.models import Host
from monitoring import services
from monitoring.models import HostToken


def test_an_operator_creates_a_token_shown_once(api, ops, fleet):
    response = api(ops).post("/api/v1/host-tokens/", {"host": "h100-a", "name": "rack 4"})
    assert response.status_code == 201
    raw = response.json()["token"]
    token = HostToken.objects.get()
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(list(HostToken.objects.values()))
    listed = api(ops).get("/api/v1/host-tokens/").json()["results"][0]
    assert "token" not in listed and listed["prefix"] == raw[:10]
    assert AuditEvent.objects.filter(action="host_token.create").exists()


def test_revoking_is_audited_and_stops_the_token(api, ops, fleet):
    token, raw = services.create_host_token(actor=ops, host=fleet["hosts"]["h100-a"])
    response = api(ops).post(f"/api/v1/host-tokens/{token.pk}/revoke/")
    assert response.json()["revoked_at"] is not None
    assert services.authenticate_agent(raw) is None
    assert AuditEvent.objects.filter(action="host_token.revoke").count() == 1


@pytest.mark.parametrize("user", ["alice", "bob", "charlie", "audrey"])
def test_only_operators_see_or_make_tokens(api, request, fleet, user):
    client = api(request.getfixturevalue(user))
    assert client.get("/api/v1/host-tokens/").status_code == 403
    assert client.post("/api/v1/host-tokens/", {"host": "h100-a"}).status_code == 403


@pytest.mark.parametrize(("body", "field"), [({"host": "nope"}, "host"), ({}, "host"),
                                            ({"host": "h100-a", "name": "x\u0000y"}, "name")])
def test_bad_input_names_the_field(api, ops, fleet, body, field):
    response = api(ops).post("/api/v1/host-tokens/", body)
    assert response.status_code == 400 and field in response.json()
    assert not HostToken.objects.exists()


def test_the_command_registers_a_new_host_and_prints_the_token_last(fleet):
    out = StringIO()
    call_command("create_host_token", "use1-new-07", "--region", "us-east-1", stdout=out)
    raw = out.getvalue().split()[-1]
    token = services.authenticate_agent(raw)
    assert token is not None and token.host.name == "use1-new-07"
    assert Host.objects.get(name="use1-new-07").region.name == "us-east-1"


def test_the_command_reuses_a_known_host(fleet):
    out = StringIO()
    call_command("create_host_token", "h100-a", stdout=out)
    assert services.authenticate_agent(out.getvalue().split()[-1]).host == fleet["hosts"]["h100-a"]
    assert "Registered" not in out.getvalue()


@pytest.mark.parametrize(("args", "message"), [
    (["bad host!"], "HOST"), (["x1", "--region", "mars"], "Unknown region"),
    (["use1-new-08", "--name", "x" * 81], "--name: A token's name is at most 80 characters"),
    (["use1-new-08", "--name", "rack\x014"], "--name: Control characters"),
])
def test_the_command_explains_bad_input(fleet, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("create_host_token", *args, stdout=StringIO())
    assert not Host.objects.filter(name__in=["x1", "use1-new-08"]).exists() and not HostToken.objects.exists()
