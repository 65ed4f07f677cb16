import pytest

from audit.models import AuditEvent
from instances.models import Instance

LAUNCH = {"name": "job-1", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand"}


def test_a_launch_names_its_image_and_the_api_shows_it(api, bob, acme, image_catalog):
    image = image_catalog["acme-private"]
    response = api(bob).post("/api/v1/instances/", {"team": acme.pk, "image": image.pk} | LAUNCH, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["image"] == {"id": image.pk, "name": "acme-private", "reference": image.reference,
                                        "retired": False}
    launched = AuditEvent.objects.get(action="instance.launch")
    assert launched.details["image"]["reference"] == image.reference


def test_a_launch_without_an_image_boots_the_models_default(launch, bob, acme, image_catalog):
    assert launch(bob, acme).image == image_catalog["pytorch"]


def test_a_launch_without_any_catalog_boots_no_named_image(launch, bob, acme):
    assert launch(bob, acme).image is None


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("old-cuda", "was retired"),
        ("tensorflow", "does not support A100-80GB"),
    ],
)
def test_an_image_that_cannot_boot_the_launch_is_a_clear_400(api, bob, acme, image_catalog, image, says):
    body = {"team": acme.pk, "image": image_catalog[image].pk} | LAUNCH | {"gpu_model": "A100-80GB"}
    response = api(bob).post("/api/v1/instances/", body, format="json")
    assert response.status_code == 400
    assert says in response.json()["image"][0]
    assert not Instance.objects.exists()


@pytest.mark.parametrize("image", [999_999, "pytorch", None])
def test_an_unknown_image_is_a_400(api, bob, acme, image_catalog, image):
    body = {"team": acme.pk, "image": image} | LAUNCH
    response = api(bob).post("/api/v1/instances/", body, format="json")
    if image is None:  # null: the default
        assert response.status_code == 201
        return
    assert response.status_code == 400 and "image" in response.json()
    assert not Instance.objects.exists()


def test_another_teams_private_image_is_refused_like_an_unknown_one(api, charlie, globex, image_catalog):
    body = {"team": globex.pk, "image": image_catalog["acme-private"].pk} | LAUNCH
    response = api(charlie).post("/api/v1/instances/", body, format="json")
    assert response.status_code == 400
    assert response.json()["image"] == ["No such image, or it is private to another team."]


def test_the_service_refuses_another_teams_private_image_too(launch, charlie, globex, image_catalog):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="private to another team"):
        launch(charlie, globex, image=image_catalog["acme-private"])


def test_retiring_stops_new_launches_not_running_ones(launch, bob, acme, ops, image_catalog):
    from django.core.exceptions import ValidationError

    from instances import images

    image = image_catalog["acme-private"]
    running = launch(bob, acme, name="keeps", image=image)
    images.retire_image(actor=ops, image=image)
    with pytest.raises(ValidationError, match="was retired"):
        launch(bob, acme, name="refused", image=image)
    running.refresh_from_db()
    assert running.state == "pending" and running.image == image
    assert AuditEvent.objects.get(action="image.retire", target_name="acme-private").details["instances_running"] == 1


def test_the_instance_page_shows_its_image(client, bob, acme, launch, image_catalog):
    instance = launch(bob, acme, image=image_catalog["acme-private"])
    client.force_login(bob)
    page = client.get(f"/instances/{instance.pk}/").content.decode()
    assert "acme-private" in page and "registry.acme.example:5000/ml/train:1.0" in page
