"""A month given anywhere (the cost page, the budgets API, the energy API) is read by one
function with one message: YYYY-MM (or its first day), between 2000 and 2199, so the
month after it always exists."""

from datetime import date

import pytest
from django.core.exceptions import ValidationError

from console.validators import MONTH_HELP, parse_month


@pytest.mark.parametrize("text, month", [("2026-12", date(2026, 12, 1)), ("2000-01-01", date(2000, 1, 1)),
                                         (" 2199-12 ", date(2199, 12, 1))])
def test_months_read(text, month):
    assert parse_month(text) == month


@pytest.mark.parametrize("text", ["1999-12", "2200-01", "0000-05", "9999-12", "2026-13", "2026-00", "2026-12-02",
                                  "2026-1", "１２３４-05", "december", "", "2026-12x"])
def test_months_refused_with_one_message(text):
    with pytest.raises(ValidationError) as refused:
        parse_month(text)
    assert refused.value.messages == [MONTH_HELP] == ["Give the month as YYYY-MM, between 2000 and 2199."]


def test_every_surface_gives_the_same_message(client, api, alice, acme):
    client.force_login(alice)
    page = client.get("/costs/", {"month": "0000-05"})
    assert page.status_code == 400 and MONTH_HELP in page.content.decode()
    energy = api(alice).get("/api/v1/energy/", {"team": acme.pk, "month": "0000-05"})
    assert energy.status_code == 400 and energy.json()["month"] == [MONTH_HELP]
    budget = api(alice).post("/api/v1/budgets/", {"team": acme.pk, "month": "0000-05", "amount": "5.00"},
                             format="json")
    assert budget.status_code == 400 and budget.json()["month"] == [MONTH_HELP]
