"""The API's parsers: the shared size and depth limits (``console.jsonlimits``) before
``json.loads``, so a hostile body is a 400 with a JSON error, never a 500; and no NUL
(U+0000) and no lone UTF-16 surrogate in any field of any body, JSON or form, answered 400
naming the field before a serializer, a lookup or a filter can take it to the database
or echo it in a message."""

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import get_encoding
from rest_framework.utils import json

from console import jsonlimits


def refuse_unstorable(data) -> None:
    found = jsonlimits.find_unstorable(data)
    if found is not None:
        where, why = found
        code = "nul_character" if why == jsonlimits.NUL_MESSAGE else "lone_surrogate"
        raise ValidationError({where or "non_field_errors": [why]}, code=code)


def _plain(data) -> dict | list:
    """A QueryDict as {key: value, or [values] when repeated}, other data as it is."""
    if not hasattr(data, "lists"):
        return data
    return {key: values[0] if len(values) == 1 else values for key, values in data.lists()}


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = get_encoding(parser_context or {})
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        # Read at most one byte past the limit: a body over it is refused unread.
        body = stream.read(limit + 1) if stream is not None else b""
        try:
            text = body.decode(encoding)
        except UnicodeDecodeError:
            raise ParseError(f"JSON parse error - the body is not valid {encoding}") from None
        try:
            data = jsonlimits.loads(text, max_bytes=limit, parse_constant=json.strict_constant if self.strict else None)
        except jsonlimits.JsonRefused as exc:
            raise ParseError(f"JSON parse error - {exc.message}", code=exc.code) from None
        except ValueError as exc:  # NaN / Infinity under STRICT_JSON
            raise ParseError(f"JSON parse error - {exc}") from None
        refuse_unstorable(data)
        return data


class FormParser(parsers.FormParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        refuse_unstorable(_plain(data))
        return data


class MultiPartParser(parsers.MultiPartParser):
    def parse(self, stream, media_type=None, parser_context=None):
        result = super().parse(stream, media_type, parser_context)
        refuse_unstorable(_plain(result.data))  # file names: Django's parser strips unprintable characters
        return result
