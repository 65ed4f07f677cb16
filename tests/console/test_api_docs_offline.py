"""/api/docs/ serves Swagger UI from the installed sidecar package, so it works offline."""

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db


def test_swagger_ui_comes_from_this_server(alice):
    client = Client()
    client.force_login(alice)
    html = client.get("/api/docs/").content.decode()
    assert "cdn.jsdelivr.net" not in html and "unpkg.com" not in html
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
