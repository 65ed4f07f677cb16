"""Every path and query parameter of every API read, and the pages that take an id from
the path, answer hostile values (NUL, out-of-range numbers, far dates) with a 4xx, never
a 500: PostgreSQL refuses NUL in text and integers past bigint, so checks sit at the edge."""

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db

HOSTILE_QUERY = ["\x00", "a\x00b", str(2**70), "-" + str(2**70), "9999-12-31T23:59:59Z", "0001-01-01", "abc", ""]
HOSTILE_PATH = ["%00", "a%00b", str(2**70), "-1", "abc"]


def _reads():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, operations in schema["paths"].items():
        get = operations.get("get")
        if get is not None:
            yield path, [p for p in get.get("parameters", []) if p["in"] == "query"]


READS = list(_reads())


def _fill(path, value="1"):
    import re

    return re.sub(r"\{[^}]+\}", value, path)


def _assert_4xx_or_ok(response, what):
    assert response.status_code < 500, f"{what}: {response.status_code} {response.content[:300]!r}"


@pytest.mark.parametrize(("path", "params"), READS, ids=[r[0] for r in READS])
def test_hostile_query_values(api, ops, bob, path, params):
    for user in (ops, bob):
        client = api(user)
        for param in params:
            for value in HOSTILE_QUERY:
                _assert_4xx_or_ok(client.get(_fill(path), {param["name"]: value}), f"{path}?{param['name']}={value!r}")


@pytest.mark.parametrize("path", [r[0] for r in READS if "{" in r[0]])
def test_hostile_path_values(api, ops, path):
    client = api(ops)
    for value in HOSTILE_PATH:
        response = client.get(_fill(path, value))
        _assert_4xx_or_ok(response, _fill(path, value))
        assert response.status_code in (400, 404), (_fill(path, value), response.status_code)


PAGES = [
    "/gpus/{}/", "/monitoring/gpus/{}/figures/", "/hosts/{}/", "/instances/{}/", "/invoices/{}/",
    "/audit/{}/", "/hosts/{}/tokens/", "/monitoring/instances/{}/panel/", "/monitoring/instances/{}/figures/", "/budgets/{}/delete/",
]


@pytest.mark.parametrize("page", PAGES)
def test_hostile_page_ids(ops, page):
    client = Client()
    client.force_login(ops)
    for value in HOSTILE_PATH:
        response = client.get(page.format(value))
        _assert_4xx_or_ok(response, page.format(value))


@pytest.mark.parametrize("query", ["uuid=%00", "host=%00", "team=" + str(2**70), "gpu=a%00b", "x=\x00"])
def test_hostile_metrics_queries(ops, query):
    client = Client()
    client.force_login(ops)
    response = client.get("/metrics?" + query)
    _assert_4xx_or_ok(response, query)


@pytest.mark.parametrize("url", [
    "/api/v1/gpus/%00/", "/api/v1/gpu-latest/%00/", "/api/v1/gpus/%00/metrics/", "/gpus/%00/",
    "/monitoring/gpus/%00/figures/", "/metrics?uuid=%00", "/api/v1/gpu-events/?uuid=%00",
    "/api/v1/gpus/?host__name=a%00", "/login/?next=%00",
])
def test_a_nul_anywhere_in_the_url_is_a_400(bob, url):
    client = Client()
    client.force_login(bob)
    response = client.get(url)
    assert response.status_code == 400
    if url.startswith("/api/"):
        assert response.json()["detail"].endswith("contains a NUL character.")
    else:
        assert b"contains a NUL character." in response.content
