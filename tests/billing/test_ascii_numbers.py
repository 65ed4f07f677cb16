"""Money and prices are read as ASCII decimals only, everywhere: Python's Decimal would
take "１２" (full-width digits) as 12 and "1_000" as 1000, so the API, the forms, the
spot-price import and the services all read them with one parser and refuse the rest
by name."""

from decimal import Decimal

import pytest
from django import forms
from django.core.exceptions import ValidationError
from rest_framework import serializers

from billing import pricing
from billing.forms import SpotPriceForm
from billing.models import SpotPrice
from console.validators import ascii_decimal

NOT_ASCII = ["１２", "1_000", "١٢", "12e3", "NaN", "Infinity", "-inf", "0x10", "1.2.3", "", " ", "1 000", "+-1", "½"]
ASCII = [("12", Decimal("12")), ("  0.95 ", Decimal("0.95")), ("-1.5", Decimal("-1.5")), (".5", Decimal("0.5")),
         ("3.", Decimal("3")), (7, Decimal(7)), (0.25, Decimal("0.25"))]


@pytest.mark.parametrize("text", NOT_ASCII)
def test_the_parser_refuses_what_is_not_an_ascii_decimal(text):
    with pytest.raises(ValueError, match="digits 0-9"):
        ascii_decimal(text)


@pytest.mark.parametrize(("value", "expected"), ASCII)
def test_the_parser_reads_ascii_decimals(value, expected):
    assert ascii_decimal(value) == expected


@pytest.mark.parametrize("text", ["１２", "1_000"])
def test_pricing_refuses_them_too(text):
    with pytest.raises(ValueError):
        pricing.money(text)


@pytest.mark.parametrize("text", ["１２", "1_000", "1e3"])
def test_every_serializer_and_form_decimal_field_refuses_them(text):
    with pytest.raises(serializers.ValidationError):
        serializers.DecimalField(max_digits=14, decimal_places=6).run_validation(text)
    with pytest.raises(ValidationError):
        forms.DecimalField(max_digits=14, decimal_places=6).clean(text)


@pytest.mark.parametrize("hourly", ["１２", "1_000", "０.５"])
def test_the_spot_price_api_refuses_them(api, ops, prices, hourly):
    before = SpotPrice.objects.count()
    response = api(ops).post("/api/v1/spot-prices/", {"sku": "A100-80GB", "hourly": hourly}, format="json")
    assert response.status_code == 400
    assert "digits 0-9" in response.json()["hourly"][0]
    assert SpotPrice.objects.count() == before


def test_the_spot_price_api_still_takes_an_ascii_price(api, ops, prices):
    response = api(ops).post("/api/v1/spot-prices/", {"sku": "A100-80GB", "hourly": "0.50"}, format="json")
    assert response.status_code == 201


def test_the_spot_price_form_refuses_them(prices):
    form = SpotPriceForm({"sku": "A100-80GB", "hourly": "1_000"})
    assert not form.is_valid()
    assert "digits 0-9" in form.errors["hourly"][0]


def test_a_launchs_max_price_refuses_them(api, bob, acme, prices):
    response = api(bob).post("/api/v1/instances/", {
        "team": acme.pk, "name": "spotty", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "spot",
        "max_price": "１",
    }, format="json")
    assert response.status_code == 400
    assert "max_price" in response.json()
