"""Every list of the API renders in the browsable form a browser gets (HTML, with the
forms that write to it) for a team admin and for an operator, with rows in it: a field
whose read form is an object still lists its choices by id, and a list that reads its
own query parameters has no ordering form to build."""

import pytest
from django.test import Client

from gpuconsole.api_urls import router


@pytest.fixture
def images(image_catalog, acme_instance, globex_instance):
    return image_catalog


def _browser(user) -> Client:
    client = Client(raise_request_exception=True)
    client.force_login(user)
    return client


@pytest.mark.parametrize("who", ["alice", "ops"])
def test_every_api_list_renders_as_html(images, alice, ops, who):
    client = _browser({"alice": alice, "ops": ops}[who])
    failed = {}
    for prefix in sorted(prefix for prefix, _viewset, _basename in router.registry):
        try:
            response = client.get(f"/api/v1/{prefix}/", HTTP_ACCEPT="text/html")
        except Exception as exc:  # noqa: BLE001 - every list's failure, named at once
            failed[prefix] = f"{type(exc).__name__}: {exc}"
            continue
        if response.status_code not in (200, 400, 403, 405):  # 400: a required parameter, named
            failed[prefix] = response.status_code
        elif response.status_code == 200 and not response["Content-Type"].startswith("text/html"):
            failed[prefix] = response["Content-Type"]
    assert failed == {}


def test_a_list_given_its_required_parameter_renders_as_html(images, alice, acme):
    response = _browser(alice).get("/api/v1/energy/", {"team": acme.pk}, HTTP_ACCEPT="text/html")
    assert response.status_code == 200 and "&quot;team&quot;: " in response.content.decode()


def test_the_image_field_offers_images_by_id(images, alice):
    html = _browser(alice).get("/api/v1/instances/", HTTP_ACCEPT="text/html").content.decode()
    assert f'<option value="{images["pytorch"].pk}"' in html
