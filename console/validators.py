"""Field validators shared by forms and API serializers."""

import re
from datetime import UTC, datetime

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


def moment_in_range(value: datetime) -> None:
    if value is None:
        return
    if is_naive(value):
        value = value.replace(tzinfo=UTC)
    if not EARLIEST <= value < LATEST:
        raise ValidationError(
            f"Give a time between {EARLIEST.year} and {LATEST.year - 1}.", code="out_of_range"
        )
