from audit.models import AuditEvent
from instances.models import Image

GOOD = {"name": "our-train", "reference": "registry.acme.example/ml/train:2.0", "gpu_models": ["H100-80GB"],
        "framework": "PyTorch", "framework_version": "2.5.1", "cuda_version": "12.6", "size_bytes": 123}


def _names(response):
    return sorted(i["name"] for i in response.json()["results"])


def test_a_team_sees_public_images_and_its_own(api, bob, charlie, image_catalog):
    assert _names(api(bob).get("/api/v1/images/")) == ["acme-private", "old-cuda", "pytorch", "tensorflow"]
    assert _names(api(charlie).get("/api/v1/images/")) == ["old-cuda", "pytorch", "tensorflow"]


def test_another_teams_private_image_is_a_404(api, charlie, image_catalog):
    assert api(charlie).get(f"/api/v1/images/{image_catalog['acme-private'].pk}/").status_code == 404


def test_the_list_filters_out_retired_images(api, bob, image_catalog):
    response = api(bob).get("/api/v1/images/?retired_at__isnull=true&gpu_models__name=A100-80GB")
    assert _names(response) == ["acme-private", "pytorch"]


def test_a_member_adds_a_private_image_for_the_team_and_it_is_audited(api, bob, acme, fleet):
    response = api(bob).post("/api/v1/images/", GOOD | {"team": acme.pk}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["visibility"], body["team"], body["gpu_models"]) == ("private", acme.pk, ["H100-80GB"])
    event = AuditEvent.objects.get(action="image.create")
    assert event.team_id == acme.pk and event.details["reference"] == GOOD["reference"]


def test_only_operators_add_public_images(api, bob, ops, fleet):
    assert api(bob).post("/api/v1/images/", GOOD, format="json").status_code == 403
    response = api(ops).post("/api/v1/images/", GOOD, format="json")
    assert response.status_code == 201 and response.json()["visibility"] == "public"


def test_an_auditor_cannot_add_images(api, audrey, acme, fleet):
    assert api(audrey).post("/api/v1/images/", GOOD | {"team": acme.pk}, format="json").status_code == 403
    assert not Image.objects.exists()


def test_no_one_adds_an_image_for_another_team(api, charlie, acme, fleet):
    response = api(charlie).post("/api/v1/images/", GOOD | {"team": acme.pk}, format="json")
    assert response.status_code == 400 and "team" in response.json()


def test_bad_image_fields_are_named_and_nothing_is_written(api, bob, acme, fleet):
    for change, field in [({"reference": "pytorch:latest"}, "reference"), ({"reference": "nvcr.io/Bad/x"}, "reference"),
                          ({"reference": "nvcr.io/x@sha256:123"}, "reference"), ({"gpu_models": ["V100"]}, "gpu_models"),
                          ({"gpu_models": []}, "gpu_models"), ({"cuda_version": "twelve"}, "cuda_version"),
                          ({"size_bytes": -1}, "size_bytes"), ({"name": "bad\nname"}, "name")]:
        response = api(bob).post("/api/v1/images/", GOOD | {"team": acme.pk} | change, format="json")
        assert response.status_code == 400 and field in response.json(), change
    assert not Image.objects.exists()


def test_a_duplicate_name_in_the_same_team_is_refused(api, bob, acme, image_catalog):
    response = api(bob).post("/api/v1/images/", GOOD | {"team": acme.pk, "name": "acme-private"}, format="json")
    assert response.status_code == 400 and "name" in response.json()


def test_retiring_is_audited_and_keeps_the_image_listed(api, ops, bob, image_catalog):
    response = api(ops).post(f"/api/v1/images/{image_catalog['tensorflow'].pk}/retire/")
    assert response.status_code == 200 and response.json()["retired"] is True
    assert AuditEvent.objects.filter(action="image.retire", target_name="tensorflow").exists()
    assert "tensorflow" in _names(api(bob).get("/api/v1/images/"))


def test_retiring_twice_is_a_clear_400(api, ops, image_catalog):
    response = api(ops).post(f"/api/v1/images/{image_catalog['old-cuda'].pk}/retire/")
    assert response.status_code == 400 and "already retired" in str(response.json())


def test_a_team_retires_its_own_image_but_not_a_public_one(api, bob, image_catalog):
    assert api(bob).post(f"/api/v1/images/{image_catalog['pytorch'].pk}/retire/").status_code == 403
    assert api(bob).post(f"/api/v1/images/{image_catalog['acme-private'].pk}/retire/").status_code == 200


def test_operators_pick_a_models_default(api, ops, bob, image_catalog):
    url = f"/api/v1/images/{image_catalog['tensorflow'].pk}/make-default/"
    assert api(bob).post(url, {"gpu_model": "H100-80GB"}).status_code == 403
    assert api(ops).post(url, {"gpu_model": "A100-80GB"}).status_code == 400  # it does not support A100
    response = api(ops).post(url, {"gpu_model": "H100-80GB"})
    assert response.json()["default_for"] == ["H100-80GB"]
    pytorch = api(ops).get(f"/api/v1/images/{image_catalog['pytorch'].pk}/").json()
    assert pytorch["default_for"] == ["A100-80GB", "H200-141GB"]
