"""Request bodies no field can take: a lone UTF-16 surrogate (JSON's ``\\ud800`` escape
with no pair) anywhere in a JSON body, and a body that is not an object where one is
expected. Each is a 400 naming the field; before, an invalid-choice message echoed the
surrogate and the JSON renderer itself broke (500)."""

import pytest

SURROGATE = "A lone UTF-16 surrogate (U+D800 to U+DFFF) is not text and is not allowed."

# Choice fields of every kind of resource: DRF's message quotes the value it refuses.
CHOICES = [
    ("/api/v1/alert-rules/", "metric"),
    ("/api/v1/alert-rules/", "severity"),
    ("/api/v1/instances/", "pricing_model"),
    ("/api/v1/jobs/", "priority"),
    ("/api/v1/members/", "role"),
    ("/api/v1/notification-channels/", "kind"),
    ("/api/v1/reservations/", "term"),
]


@pytest.mark.parametrize("path, field", CHOICES)
def test_a_lone_surrogate_is_refused_by_name(api, alice, acme, path, field):
    body = f'{{"team": {acme.pk}, "{field}": "\\ud800"}}'
    response = api(alice).post(path, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json() == {field: [SURROGATE]}


def test_a_surrogate_in_a_key_or_deep_inside_is_named_without_it(api, alice, acme):
    client = api(alice)
    response = client.post("/api/v1/instances/", '{"tags": {"a\\udfff": "b"}}', content_type="application/json")
    assert response.status_code == 400 and response.json() == {"tags.a": [SURROGATE]}
    response = client.post("/api/v1/instances/", '{"tags": [{"k": "x"}, {"k": "\\ud800"}]}',
                           content_type="application/json")
    assert response.status_code == 400 and response.json() == {"tags[1].k": [SURROGATE]}


def test_a_surrogate_pair_is_one_character_and_accepted(api, alice, acme):
    response = api(alice).post("/api/v1/alert-rules/", f'{{"team": {acme.pk}, "name": "\\ud83d\\ude00"}}',
                               content_type="application/json")
    assert "surrogate" not in response.content.decode()


@pytest.mark.parametrize("body", ["[]", "[1, 2]", '"alice"', "7", "null"])
def test_a_member_body_that_is_not_an_object_is_refused(api, alice, acme, body):
    response = api(alice).post("/api/v1/members/", body, content_type="application/json")
    assert response.status_code == 400, response.content
