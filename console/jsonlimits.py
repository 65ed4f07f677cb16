"""The one JSON reader for untrusted input: API request bodies, agent frames and
browser messages. Size and nesting are checked before the parser runs, so a hostile
document (5,000 ``[``) gets a clear refusal instead of a ``RecursionError``.

Pure Python, no Django: the websocket consumers and the HTTP parser both call it.
"""

from __future__ import annotations

import json
import re

# Nothing this console accepts nests deeper than a handful of levels (an agent frame:
# frame → records → GPU → metrics/processes → entry); 32 leaves room and stays far
# below the interpreter's recursion limit.
MAX_DEPTH = 32
# Request bodies (``DATA_UPLOAD_MAX_MEMORY_SIZE``) and agent frames have their own byte
# limits, passed in by the caller; a browser's live message is a one-line subscription.
MAX_LIVE_MESSAGE_BYTES = 4 * 1024

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


class JsonRefused(ValueError):
    """``code`` is ``too_large``, ``too_deep`` or ``bad_json``; ``message`` one sentence."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def depth(text: str) -> int:
    """How deep brackets nest in ``text``, outside strings; stops counting past
    ``MAX_DEPTH + 1``. Each pass removes the innermost pairs, in C, so a frame of
    ordinary depth costs a few regex passes whatever its length."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0 if "[" not in text and "{" not in text else 1  # cannot be too deep
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    level = 0
    while brackets and level <= MAX_DEPTH:
        shorter = _INNERMOST.sub("", brackets)
        if shorter == brackets:  # unbalanced: the parser will say where
            break
        brackets = shorter
        level += 1
    return level


def check(text: str | bytes, *, max_bytes: int) -> None:
    """Refuse ``text`` before parsing if it is too large or nests too deep."""
    if len(text) > max_bytes:
        raise JsonRefused("too_large", f"the document is {len(text)} bytes; at most {max_bytes} are allowed")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if depth(text) > MAX_DEPTH:
        raise JsonRefused("too_deep", f"the document nests deeper than {MAX_DEPTH} levels")


def loads(text: str | bytes, *, max_bytes: int, parse_constant=None):
    """``json.loads`` behind the size and depth checks; every failure is ``JsonRefused``."""
    check(text, max_bytes=max_bytes)
    try:
        return json.loads(text, parse_constant=parse_constant)
    except RecursionError:  # cannot happen below MAX_DEPTH; kept as a last guard
        raise JsonRefused("too_deep", f"the document nests deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise JsonRefused("bad_json", "the document is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise JsonRefused("bad_json", f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    except ValueError as exc:  # an integer of over 4,300 digits, a refused constant
        raise JsonRefused("bad_json", f"not acceptable JSON ({str(exc)[:120]})") from None
