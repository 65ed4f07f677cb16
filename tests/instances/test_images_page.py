from instances.models import Image

FORM = {"owner": "", "name": "our-train", "reference": "registry.acme.example/ml/train:2.0",
        "gpu_models": ["H100-80GB"], "cuda_version": "12.6", "size_gb": "12.5"}


def _page(client, user):
    client.force_login(user)
    return client.get("/images/").content.decode()


def test_a_team_sees_public_images_and_its_own(client, bob, charlie, image_catalog):
    assert "acme-private" in _page(client, bob) and "pytorch" in _page(client, bob)
    assert "acme-private" not in _page(client, charlie)


def test_a_member_adds_the_teams_image_from_the_page(client, bob, acme, fleet):
    client.force_login(bob)
    response = client.post("/images/", FORM | {"owner": acme.pk})
    assert response.status_code == 302
    image = Image.objects.get()
    assert (image.team, image.size_bytes, image.reference) == (acme, 12_500_000_000, FORM["reference"])
    assert "12.5 GB" in client.get("/images/").content.decode()


def test_a_bad_reference_is_shown_on_the_form(client, bob, acme, fleet):
    client.force_login(bob)
    response = client.post("/images/", FORM | {"owner": acme.pk, "reference": "train:latest"})
    assert response.status_code == 400 and "Name the registry" in response.content.decode()
    assert not Image.objects.exists()


def test_only_operators_may_add_public_images(client, bob, ops, fleet):
    client.force_login(bob)
    assert client.post("/images/", FORM | {"owner": "public"}).status_code == 400
    client.force_login(ops)
    assert client.post("/images/", FORM | {"owner": "public"}).status_code == 302
    assert Image.objects.get().visibility == "public"


def test_retiring_from_the_page(client, bob, ops, image_catalog):
    client.force_login(bob)
    assert client.post(f"/images/{image_catalog['pytorch'].pk}/retire/").status_code == 403
    assert client.post(f"/images/{image_catalog['acme-private'].pk}/retire/").status_code == 302
    client.force_login(ops)
    client.post(f"/images/{image_catalog['pytorch'].pk}/retire/")
    assert set(Image.objects.filter(retired_at__isnull=False).values_list("name", flat=True)) == {
        "old-cuda", "acme-private", "pytorch"}


def test_another_teams_image_cannot_be_retired(client, charlie, image_catalog):
    client.force_login(charlie)
    assert client.post(f"/images/{image_catalog['acme-private'].pk}/retire/").status_code == 404
