"""Ids and counts a request gives are read by one function (``console.validators.
whole_number``): ASCII digits up to a bigint. "²" passes ``str.isdigit`` and then
breaks ``int``; twenty digits overflow the database. Each answers a clear 400, or the
page's default, never a 500."""

import pytest
from django.test import Client

from audit.verification import parse_bound
from console.validators import MAX_ID, whole_number

SUPERSCRIPT, HUGE, PAST_BIGINT = "²", "9" * 20, str(2**63)


@pytest.mark.parametrize("value, number", [("0", 0), ("42", 42), (str(MAX_ID), MAX_ID), (7, 7)])
def test_whole_numbers_read(value, number):
    assert whole_number(value) == number


@pytest.mark.parametrize("value", [SUPERSCRIPT, "١٢", HUGE, PAST_BIGINT, "-1", "+1", " 1", "1 ", "1.0", "", "0x1",
                                   "1_000", None, True, -1, 2**63, 1.0])
def test_anything_else_is_none(value):
    assert whole_number(value) is None


def test_the_maximum_bounds_it():
    assert whole_number("65535", 65535) == 65535 and whole_number("65536", 65535) is None


@pytest.mark.parametrize("value", [SUPERSCRIPT, HUGE, PAST_BIGINT])
def test_api_parameters_answer_400(api, alice, acme, value):
    client = api(alice)
    for path, params in (("/api/v1/costs/summary/", {"team": value}),
                         ("/api/v1/audit/consistency/", {"first": value}),
                         ("/api/v1/recommendations/", {"team": value}),
                         ("/api/v1/energy/", {"team": value})):
        response = client.get(path, params)
        assert response.status_code == 400, (path, value, response.status_code)


@pytest.mark.parametrize("value", [SUPERSCRIPT, HUGE, PAST_BIGINT])
def test_pages_fall_back_to_their_default(alice, acme, value):
    client = Client(raise_request_exception=True)
    client.force_login(alice)
    for path, params in (("/costs/", {"team": value}), ("/budgets/", {"edit": value}), ("/audit/", {"before": value}),
                         ("/savings/", {"team": value})):
        assert client.get(path, params).status_code == 200, (path, value)


@pytest.mark.parametrize("value", [SUPERSCRIPT, HUGE])
def test_a_member_added_to_a_team_named_oddly_is_refused(api, alice, value):
    response = api(alice).post("/api/v1/members/", {"team": value, "username": "x", "role": "member"}, format="json")
    assert response.status_code == 400


def test_a_verification_bound_names_itself():
    with pytest.raises(ValueError, match="neither a sequence number nor an ISO date"):
        parse_bound(SUPERSCRIPT, "--from")
