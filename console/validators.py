"""Field validators shared by forms and API serializers."""

import re
from datetime import UTC, date, datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.utils.timezone import is_naive

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._\-]*$")


def no_control_characters(value: str) -> None:
    if _CONTROL.search(value or ""):
        raise ValidationError("Control characters are not allowed.", code="control_characters")


def plain_name(value: str) -> None:
    """Names users type: letters, digits, space, dot, dash, underscore; no leading symbol."""
    no_control_characters(value)
    if not _NAME.match(value or ""):
        raise ValidationError(
            "Use letters, digits, spaces, '.', '-' or '_', starting with a letter or digit.",
            code="invalid_name",
        )


# Instants users may give anywhere (API fields, forms, query parameters): far enough for
# any real use, near enough that adding a 3-year term or a month never leaves datetime's
# range (year 9999) or PostgreSQL's.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


_MONTH = re.compile(r"([0-9]{4})-([0-9]{2})(?:-01)?\Z", re.ASCII)
MONTH_HELP = f"Give the month as YYYY-MM, between {EARLIEST.year} and {LATEST.year - 1}."


def parse_month(text) -> date:
    """A calendar month given as YYYY-MM (or its first day, YYYY-MM-01), as its first
    day; a month outside the range every time the console takes lies in is refused, so
    the month after it always exists."""
    found = _MONTH.match(str(text).strip())
    if found is None or not 1 <= int(found[2]) <= 12 or not EARLIEST.year <= int(found[1]) < LATEST.year:
        raise ValidationError(MONTH_HELP, code="invalid_month")
    return date(int(found[1]), int(found[2]), 1)


MAX_ID = 2**63 - 1  # the largest id or count a bigint (PostgreSQL) or SQLite integer holds
_WHOLE = re.compile(r"[0-9]{1,19}\Z", re.ASCII)


def whole_number(value, maximum: int = MAX_ID) -> int | None:
    """``value`` as a whole number when it is one — written in ASCII digits, no sign or
    space, at most ``maximum`` — else None. Ids and counts taken from requests are read by
    this: ``str.isdigit`` also passes "²" and other scripts' digits, which ``int`` then
    refuses, and a number past a bigint overflows the database."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= maximum else None
    if not isinstance(value, str) or not _WHOLE.match(value):
        return None
    number = int(value)
    return number if number <= maximum else None


def moment_in_range(value: datetime) -> None:
    if value is None:
        return
    if is_naive(value):
        value = value.replace(tzinfo=UTC)
    if not EARLIEST <= value < LATEST:
        raise ValidationError(
            f"Give a time between {EARLIEST.year} and {LATEST.year - 1}.", code="out_of_range"
        )


def clamp_moment(value: datetime) -> datetime:
    """A bound of a time range (``since``, ``--to``) brought into the years above: no
    record lies outside them, so a bound before 2000 selects what 2000 does and one past
    2199 what 2200 does — and year 1 at +05:00, which has no UTC form, no longer
    overflows on its way to the database."""
    if is_naive(value):
        value = value.replace(tzinfo=UTC)
    return EARLIEST if value < EARLIEST else LATEST if value > LATEST else value


# Python's Decimal (and int) also read other scripts' digits ("１２" is 12), underscores
# ("1_000"), exponents, NaN and Infinity. Money and prices are read by this instead.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\Z", re.ASCII)
DECIMAL_HELP = "digits 0-9 and at most one '.', e.g. 1.25"


def ascii_decimal(value) -> Decimal:
    """``value`` as a finite Decimal when it is one, an int, a float or ASCII decimal text
    (sign, digits 0-9, one optional point; surrounding spaces allowed); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a decimal number ({DECIMAL_HELP})")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float | Decimal):
        found = Decimal(repr(value)) if isinstance(value, float) else value
        if not found.is_finite():
            raise ValueError(f"{value!r} is not a decimal number ({DECIMAL_HELP})")
        return found
    text = str(value).strip(" \t\r\n")
    if not _DECIMAL.match(text):
        raise ValueError(f"{text[:40]!r} is not a decimal number ({DECIMAL_HELP})")
    return Decimal(text)


def ascii_decimal_fields() -> None:
    """Every DecimalField of every form and serializer reads only ASCII decimals
    (``ascii_decimal``), so no app can forget it."""
    from django import forms
    from django.utils import formats
    from rest_framework import fields

    def serializer_value(self, data, _parse=fields.DecimalField.to_internal_value):
        try:
            ascii_decimal(data)
        except ValueError:
            raise fields.ValidationError(f"A valid number is required ({DECIMAL_HELP}).", code="invalid") from None
        return _parse(self, data)

    def form_value(self, value, _parse=forms.DecimalField.to_python):
        if value not in self.empty_values:
            try:
                ascii_decimal(formats.sanitize_separators(value) if self.localize else value)
            except ValueError:
                raise ValidationError(f"Enter a number ({DECIMAL_HELP}).", code="invalid") from None
        return _parse(self, value)

    if not getattr(fields.DecimalField, "ascii_only", False):
        fields.DecimalField.to_internal_value = serializer_value
        fields.DecimalField.ascii_only = True
        forms.DecimalField.to_python = form_value
        forms.DecimalField.ascii_only = True
