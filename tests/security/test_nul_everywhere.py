"""A NUL (U+0000) anywhere in a request, on every URL the console routes, GET and
POST, page and API: in the path, the query string, a header or cookie, a form field (name or
value, multipart too) or a JSON field at any depth. Every one is a 400 naming where the
NUL is, and none reaches the database: PostgreSQL text cannot hold U+0000 (it answers
with a DataError, a 500), so here every statement is checked for a NUL parameter,
which makes these tests fail on SQLite too."""

import html
import io
import logging
import re
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test import Client
from django.urls import URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db


class NulReachedTheDatabase(AssertionError):
    pass


def _holds_nul(value) -> bool:
    if isinstance(value, str | bytes):
        return ("\x00" if isinstance(value, str) else b"\x00") in value
    if isinstance(value, list | tuple | set):
        return any(_holds_nul(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    return False


def _refuse_nul(execute, sql, params, many, context):
    if "\x00" in sql or _holds_nul(params):
        raise NulReachedTheDatabase(f"{sql[:200]} {params!r:.300}")
    return execute(sql, params, many, context)


@contextmanager
def nul_watch():
    with connection.execute_wrapper(_refuse_nul):
        yield


def test_the_watch_catches_a_nul_on_sqlite_too(bob):
    from django.contrib.auth.models import User

    with nul_watch(), pytest.raises(NulReachedTheDatabase):
        User.objects.filter(username="b\x00ob").exists()


# --- every routed URL ------------------------------------------------------------------

_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>")


def _routes(resolver=None, prefix=""):
    for pattern in (resolver or get_resolver()).url_patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern, prefix + str(pattern.pattern))
        elif "format" not in str(pattern.pattern):
            yield prefix + str(pattern.pattern)


def _path(route: str, value: str) -> str:
    path = _GROUP.sub(value, route.replace("^", "").replace("$", "").replace("/?", "/"))
    return "/" + path.replace("\\.", ".")


ROUTES = sorted(set(_routes()))
WITH_PARAMS = [r for r in ROUTES if _GROUP.search(r)]


def _api_fields() -> list[str]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    names = set()
    for name, component in schema["components"]["schemas"].items():
        if name.endswith("Request"):
            names |= set(component.get("properties", {}))
    return sorted(names)


API_FIELDS = _api_fields()
FORM_NAME = re.compile(rb'<(?:input|select|textarea)[^>]*\bname="([^"]+)"')


@pytest.fixture
def world(acme_instance, ops, bob, alice, charlie):
    clients = {}
    for user in (ops, bob):
        client = Client()
        client.force_login(user)
        clients[user.username] = client
    clients["anonymous"] = Client()
    return clients


def _form_fields(client, path: str) -> list[str]:
    response = client.get(path)
    page = response.status_code == 200 and response["Content-Type"].startswith("text/html")
    found = set(FORM_NAME.findall(response.content)) if page else set()
    return sorted({name.decode() for name in found} - {"csrfmiddlewaretoken"}) or ["name"]


def _refused(response, what: str):
    assert response.status_code == 400, f"{what}: {response.status_code} {response.content[:300]!r}"


@pytest.mark.parametrize("route", WITH_PARAMS)
def test_a_nul_in_the_path_is_a_400(world, route):
    with nul_watch():
        for client in world.values():
            for value in ("%00", "1%00"):
                path = _path(route, value)
                _refused(client.get(path), f"GET {path}")
                _refused(client.post(path, {}), f"POST {path}")


@pytest.mark.parametrize("route", ROUTES)
def test_a_nul_in_the_query_string_is_a_400(world, route):
    path = _path(route, "1")
    with nul_watch():
        for client in world.values():
            for query in ("team=1%00", "%00=1", "state=running&uuid=GPU%00"):
                _refused(client.get(f"{path}?{query}"), f"GET {path}?{query}")


@pytest.mark.parametrize("route", ROUTES)
def test_a_nul_in_a_header_is_a_400(world, route):
    path = _path(route, "1")
    with nul_watch():
        for header in ("HTTP_USER_AGENT", "HTTP_X_REQUEST_ID", "HTTP_X_FORWARDED_FOR", "HTTP_REFERER"):
            _refused(world["bob"].get(path, **{header: "curl/8\x00"}), f"{header} on {path}")
        cookie = 'sessionid="abcdefghij\\000"'  # a quoted cookie's octal escape is a NUL once parsed
        _refused(world["anonymous"].get(path, HTTP_COOKIE=cookie), f"a NUL in a cookie on {path}")


@pytest.mark.parametrize("route", ROUTES)
def test_a_nul_in_any_field_of_a_form_is_a_400(world, route):
    path = _path(route, "1")
    for who, client in world.items():
        fields = _form_fields(client, path)
        with nul_watch():
            for field in fields:
                for value in ("\x00", "1\x00", "acme\x00"):
                    _refused(client.post(path, {field: value}), f"{who} POST {path} {field}={value!r}")
            _refused(client.post(path, {"name\x00": "x"}), f"{who} POST {path} with a NUL in a field name")
            upload = io.BytesIO(b"gpu_model,price\n")
            upload.name = "prices.csv"
            _refused(client.post(path, {"file": upload, "note": "a\x00"}), f"{who} POST {path} multipart")


@pytest.mark.parametrize("route", [r for r in ROUTES if r.startswith("api/")])
def test_a_nul_in_any_field_of_an_api_body_is_a_400(world, route):
    path = _path(route, "1")
    with nul_watch():
        for who, client in world.items():
            for method in (client.post, client.put, client.patch):
                for body in ({field: "x\x00" for field in API_FIELDS}, {"items": [{"name": "ok"}, {"name": "a\x00"}]},
                             {"name\x00": 1}, '"a\\u0000"', ["\x00"]):
                    response = method(path, body, content_type="application/json")
                    _refused_or_not_read(response, who, f"{who} {method.__name__.upper()} {path} {body!r:.80}")
                response = method(path, "name=a%00b", content_type="application/x-www-form-urlencoded")
                _refused_or_not_read(response, who, f"{who} {method.__name__.upper()} {path} as a form")


def _refused_or_not_read(response, who, what):
    """A body is read only by a view that takes the method, from a user who may call it,
    on an object that exists, by an action that has fields (a verb such as cancel reads
    none): then it is a 400; any other answer but a 5xx is the view's own."""
    assert response.status_code < 500, f"{what}: {response.status_code} {response.content[:300]!r}"
    if response.status_code == 400 and response["Content-Type"] == "application/json":
        assert "NUL" in response.content.decode() or who != "ops", f"{what}: {response.content[:300]!r}"


# --- what the answer says, and what the log says -------------------------------------


@pytest.mark.parametrize(("url", "message"), [
    ("/api/v1/gpus/%00/", "The URL path contains a NUL character."),
    ("/metrics?uuid=%00", "The query parameter 'uuid' contains a NUL character."),
    ("/api/v1/instances/?state=run%00ning", "The query parameter 'state' contains a NUL character."),
])
def test_the_answer_names_where_the_nul_is(bob, url, message):
    client = Client()
    client.force_login(bob)
    response = client.get(url)
    assert response.status_code == 400
    if url.startswith("/api/"):
        assert response.json() == {"detail": message, "code": "bad_request"}
    else:
        assert html.escape(message).encode() in response.content


def test_the_sign_in_form_names_the_field(db):
    response = Client().post("/login/", {"username": "bo\x00b", "password": "x"})
    assert response.status_code == 400
    assert html.escape("The field 'username' contains a NUL character.").encode() in response.content


def test_an_api_body_names_the_json_field(api, alice, acme):
    response = api(alice).post("/api/v1/budgets/", {"team": acme.pk, "name": "q\x00", "amount": "10"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"name": ["A NUL character (U+0000) is not allowed."]}


def test_a_nested_json_field_is_named_by_its_path(api, alice):
    response = api(alice).post("/api/v1/budgets/", {"tags": [{"k": "ok"}, {"k": "a\x00"}]}, format="json")
    assert response.json() == {"tags[1].k": ["A NUL character (U+0000) is not allowed."]}


def test_a_nul_is_logged_as_bad_input_without_a_traceback(bob, caplog):
    client = Client()
    client.force_login(bob)
    with caplog.at_level(logging.DEBUG):
        assert client.get("/api/v1/gpus/%00/").status_code == 400
    assert [r.levelname for r in caplog.records if "NUL" in r.getMessage()] == ["INFO"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
