"""charlie (Globex) never sees or touches Acme's instances: 404, not 403."""

import pytest


def test_charlie_cannot_list_acme_instances(api, charlie, acme_instance, globex_instance):
    names = [i["name"] for i in api(charlie).get("/api/v1/instances/").json()["results"]]
    assert names == ["globex-train"]


def test_charlie_gets_404_for_an_acme_instance(api, charlie, acme_instance):
    assert api(charlie).get(f"/api/v1/instances/{acme_instance.pk}/").status_code == 404


@pytest.mark.parametrize("verb", ["start", "stop", "terminate"])
def test_charlie_cannot_act_on_an_acme_instance(api, charlie, acme_instance, verb):
    response = api(charlie).post(f"/api/v1/instances/{acme_instance.pk}/{verb}/")
    assert response.status_code == 404
    acme_instance.refresh_from_db()
    assert acme_instance.state == "running"


def test_charlie_cannot_launch_into_acme(api, charlie, acme, fleet):
    body = {"team": acme.pk, "name": "sneaky", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand"}
    response = api(charlie).post("/api/v1/instances/", body)
    assert response.status_code == 400
    assert "team" in response.json()


def test_charlie_sees_no_acme_gpus(api, charlie, acme_instance):
    assert api(charlie).get("/api/v1/gpus/").json()["results"] == []
    uuid = acme_instance.gpus.first().uuid
    assert api(charlie).get(f"/api/v1/gpus/{uuid}/").status_code == 404


def test_bob_sees_the_gpus_his_team_holds(api, bob, acme_instance):
    uuids = {g["uuid"] for g in api(bob).get("/api/v1/gpus/").json()["results"]}
    assert uuids == set(acme_instance.gpus.values_list("uuid", flat=True))


def test_charlie_cannot_read_acme_members(api, charlie, alice, bob):
    usernames = {m["username"] for m in api(charlie).get("/api/v1/members/").json()["results"]}
    assert usernames == {"charlie"}


def test_anonymous_gets_401(api, acme_instance):
    assert api().get("/api/v1/instances/").status_code == 401


def test_operator_sees_every_team(api, ops, acme_instance, globex_instance):
    assert api(ops).get("/api/v1/instances/").json()["count"] == 2
