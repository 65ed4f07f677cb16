"""Field validators shared by forms and API serializers."""

import re

from django.core.exceptions import ValidationError

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
