"""The API's JSON parser: the shared size and depth limits (``console.jsonlimits``)
before ``json.loads``, so a hostile body is a 400 with a JSON error, never a 500."""

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser as DrfJSONParser
from rest_framework.parsers import get_encoding
from rest_framework.utils import json

from console import jsonlimits


class JSONParser(DrfJSONParser):
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
            return jsonlimits.loads(text, max_bytes=limit, parse_constant=json.strict_constant if self.strict else None)
        except jsonlimits.JsonRefused as exc:
            raise ParseError(f"JSON parse error - {exc.message}", code=exc.code) from None
        except ValueError as exc:  # NaN / Infinity under STRICT_JSON
            raise ParseError(f"JSON parse error - {exc}") from None
