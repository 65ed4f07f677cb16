"""Values that used to overflow or crash deeper in: far dates and non-numeric ids."""

import pytest
from django.test import Client

from billing.forms import ReservationForm
from billing.models import Reservation
from console.models import ApiToken
from console.services import create_api_token

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("start", ["9999-06-01T00:00:00Z", "9999-12-31T23:59:59Z", "2200-01-01T00:00:00Z", "1970-01-01T00:00:00Z"])
def test_a_reservation_starting_out_of_range_is_a_400(api, alice, acme, fleet, start):
    response = api(alice).post("/api/v1/reservations/", {
        "team": acme.pk, "gpu_model": "H100-80GB", "gpu_count": 1, "term": "3y", "start": start,
    })
    assert response.status_code == 400
    assert response.json()["start"] == ["Give a time between 2000 and 2199."]
    assert not Reservation.objects.exists()


def test_the_reservation_form_bounds_its_start_too(alice, acme, fleet):
    form = ReservationForm({"team": acme.pk, "gpu_model": "H100-80GB", "gpu_count": 1, "term": "3y",
                            "start": "9999-06-01 00:00"}, user=alice)
    assert not form.is_valid()
    assert form.errors["start"] == ["Give a time between 2000 and 2199."]


@pytest.mark.parametrize("query", ["start=9999-12-01", "end=9999-12-31", "start=0001-01-01"])
def test_a_cost_range_out_of_range_is_a_400(api, alice, acme, query):
    response = api(alice).get("/api/v1/costs/?" + query)
    assert response.status_code == 400


@pytest.mark.parametrize("revoke", ["abc", "", "1.5", "\x00", str(2**70)])
def test_revoking_a_token_by_a_bad_id_says_so(bob, revoke):
    token, _ = create_api_token(actor=bob, user=bob, name="laptop")
    client = Client()
    client.force_login(bob)
    response = client.post("/account/tokens/", {"revoke": revoke})
    assert response.status_code == 400
    assert (b"NUL character" if "\x00" in revoke else b"No such token") in response.content
    token.refresh_from_db()
    assert token.revoked_at is None
    assert ApiToken.objects.count() == 1


def test_revoking_another_users_token_is_a_404(alice, bob):
    token, _ = create_api_token(actor=alice, user=alice, name="laptop")
    client = Client()
    client.force_login(bob)
    assert client.post("/account/tokens/", {"revoke": str(token.pk)}).status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_api_root_links_to_the_api_not_the_pages(api, bob):
    links = api(bob).get("/api/v1/").json()
    assert {"hosts", "instances", "alerts", "prices", "reservations", "budgets", "invoices"} <= set(links)
    assert all("/api/v1/" in url for url in links.values()), links
