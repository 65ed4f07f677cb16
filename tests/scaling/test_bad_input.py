"""Bad settings and bad queue depths answer 400 with a message naming the field, and
change nothing; the wrong token scope is a 403 and another team's group a 404."""

import pytest

from scaling.models import ScalingGroup

GOOD = {"name": "workers", "gpu_model": "H100-80GB", "gpus_per_instance": 1, "min_instances": 1,
        "max_instances": 4, "target_per_instance": 10}


@pytest.mark.parametrize("change, field, words", [
    ({"min_instances": 5, "max_instances": 2}, "min_instances", "above the maximum"),
    ({"min_instances": -1}, "min_instances", "between 0 and 64"),
    ({"max_instances": 0}, "max_instances", "between 1 and 64"),
    ({"max_instances": 10_000}, "max_instances", "between 1 and 64"),
    ({"target_per_instance": 0}, "target_per_instance", "between 1"),
    ({"gpus_per_instance": 17}, "gpus_per_instance", "between 1 and 16"),
    ({"scale_in_cooldown_s": -5}, "scale_in_cooldown_s", "between 0 and 86400"),
    ({"gpu_model": "B300-288GB"}, "gpu_model", "Unknown GPU model B300-288GB"),
    ({"pricing_model": "free"}, "pricing_model", "not a valid choice"),
    ({"pricing_model": "spot", "max_price": "-1"}, "max_price", "above 0"),
    ({"pricing_model": "spot", "max_price": "5000"}, "max_price", "at most 100 per GPU-hour"),  # 100 × on-demand
    ({"max_price": "1.20"}, "max_price", "spot groups only"),
    ({"max_instances": "many"}, "max_instances", "valid integer"),
    ({"name": "-workers"}, "name", "starting with a letter"),
])
def test_it_refuses_bad_settings(api, fleet, acme, bob, change, field, words):
    response = api(bob).post("/api/v1/scaling-groups/", {**GOOD, "team": acme.pk, **change}, format="json")
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()[field])
    assert not ScalingGroup.objects.exists()


def test_a_change_is_checked_against_the_rest(api, group, bob):
    response = api(bob).patch(f"/api/v1/scaling-groups/{group.pk}/", {"max_instances": 0}, format="json")
    assert response.status_code == 400
    response = api(bob).patch(f"/api/v1/scaling-groups/{group.pk}/", {"min_instances": 9}, format="json")
    assert "above the maximum (4)" in response.json()["min_instances"][0]
    group.refresh_from_db()
    assert (group.min_instances, group.max_instances) == (1, 4)


def test_a_taken_name_is_refused(api, group, acme, bob):
    response = api(bob).post("/api/v1/scaling-groups/", {**GOOD, "team": acme.pk}, format="json")
    assert response.status_code == 400
    assert "already" in response.json()["name"][0]


@pytest.mark.parametrize("body", [
    {"queue_depth": "12"}, {"queue_depth": "lots"}, {"queue_depth": -1}, {"queue_depth": True},
    {"queue_depth": 10**12}, {"queue_depth": 3.5}, {"queue_depth": None}, {"depth": 4}, [4],
])
def test_it_refuses_a_bad_queue_depth(token, group, bob, body):
    response = token(bob).post(f"/api/v1/scaling-groups/{group.pk}/metrics/", body, format="json")
    assert response.status_code == 400, response.content
    assert "queue_depth" in response.json()
    group.refresh_from_db()
    assert group.queue_depth is None


def test_a_read_only_token_cannot_push(token, group, bob):
    response = token(bob, scopes=["read"]).post(f"/api/v1/scaling-groups/{group.pk}/metrics/", {"queue_depth": 3},
                                                format="json")
    assert response.status_code == 403
    assert "'write' scope" in response.json()["detail"]


def test_an_auditor_cannot_push(token, group, audrey):
    response = token(audrey).post(f"/api/v1/scaling-groups/{group.pk}/metrics/", {"queue_depth": 3}, format="json")
    assert response.status_code == 403


def test_another_team_sees_no_group(api, token, group, charlie):
    assert api(charlie).get(f"/api/v1/scaling-groups/{group.pk}/").status_code == 404
    assert api(charlie).get("/api/v1/scaling-groups/").json()["results"] == []
    response = token(charlie).post(f"/api/v1/scaling-groups/{group.pk}/metrics/", {"queue_depth": 3}, format="json")
    assert response.status_code == 404


def test_a_group_cannot_be_made_for_another_team(api, fleet, globex, bob):
    response = api(bob).post("/api/v1/scaling-groups/", {**GOOD, "team": globex.pk}, format="json")
    assert response.status_code == 400
    assert not ScalingGroup.objects.exists()


def test_another_teams_private_image_is_refused(api, fleet, acme, globex, bob, charlie):
    from instances import images

    theirs = images.create_image(actor=charlie, name="globex-only", reference="registry.example.com/globex/x:1",
                                 gpu_models=[fleet["h100"]], team=globex)
    response = api(bob).post("/api/v1/scaling-groups/", {**GOOD, "team": acme.pk, "image": theirs.pk}, format="json")
    assert response.status_code == 400
    assert "private to another team" in response.json()["image"][0]
