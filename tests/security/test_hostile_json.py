"""Deeply nested or oversized JSON gets a clear refusal everywhere JSON is read: a 400
with a JSON body on the API, 4400 on both websockets; nothing is written."""

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from console import jsonlimits
from instances.models import Instance

DEEP = "[" * 5000 + "]" * 5000


def post(client, path, body, content_type="application/json"):
    return client.generic("POST", path, body, content_type=content_type)


def assert_json_400(response):
    assert response.status_code == 400, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    assert "detail" in response.json()


@pytest.mark.django_db
def test_it_refuses_deep_json_to_the_anonymous_token_endpoint():
    response = post(APIClient(), "/api/v1/auth/token/", DEEP)
    assert_json_400(response)
    assert "nests deeper than 32" in response.json()["detail"]


@pytest.mark.django_db
def test_it_refuses_deep_json_to_launch_and_launches_nothing(api, bob, fleet):
    response = post(api(bob), "/api/v1/instances/", '{"name": ' + DEEP + "}")
    assert_json_400(response)
    assert not Instance.objects.exists()


@pytest.mark.django_db
def test_it_accepts_json_at_the_depth_limit():
    nested = "[" * (jsonlimits.MAX_DEPTH - 1) + "]" * (jsonlimits.MAX_DEPTH - 1)
    response = post(APIClient(), "/api/v1/auth/token/", '{"username": ' + nested + "}")
    assert response.status_code == 400
    assert "username" in response.json()  # parsed, then refused by the serializer


@pytest.mark.django_db
def test_brackets_inside_strings_do_not_count():
    response = post(APIClient(), "/api/v1/auth/token/", '{"username": "x", "password": "' + "[{" * 100 + '"}')
    assert response.status_code == 400
    assert response.json() == {"detail": "Wrong username or password."}  # parsed, then checked


@pytest.mark.django_db
def test_an_oversized_json_body_is_a_json_400(api, bob, fleet):
    body = '{"name": "' + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE + '"}'
    response = post(api(bob), "/api/v1/instances/", body)
    assert_json_400(response)
    assert not Instance.objects.exists()


@pytest.mark.django_db
def test_an_oversized_form_body_is_a_json_400(api, bob, fleet):
    body = "name=" + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = post(api(bob), "/api/v1/instances/", body, "application/x-www-form-urlencoded")
    assert_json_400(response)


@pytest.mark.django_db
def test_an_oversized_form_body_to_a_page_is_an_html_400(client, bob):
    client.force_login(bob)
    body = "name=" + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = client.generic("POST", "/account/tokens/", body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.django_db
def test_an_unknown_api_path_is_a_json_404(api, bob):
    response = api(bob).get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_the_depth_check_is_exact():
    at_limit = "[" * jsonlimits.MAX_DEPTH + "]" * jsonlimits.MAX_DEPTH
    assert jsonlimits.loads(at_limit, max_bytes=10_000) is not None
    with pytest.raises(jsonlimits.JsonRefused) as caught:
        jsonlimits.loads("[" + at_limit + "]", max_bytes=10_000)
    assert caught.value.code == "too_deep"
    with pytest.raises(jsonlimits.JsonRefused) as caught:
        jsonlimits.loads('{"a": ' * 40 + "1" + "}" * 40, max_bytes=10_000)
    assert caught.value.code == "too_deep"
