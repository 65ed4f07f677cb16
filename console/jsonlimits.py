"""The one JSON reader for untrusted input: API request bodies, agent frames and
browser messages. Size is checked before the parser runs and nesting after it (the C
parser gives up on thousands of levels with a ``RecursionError``, caught here), so a
hostile document (5,000 ``[``) gets a clear refusal, never a server error.

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


class JsonRefused(ValueError):
    """``code`` is ``too_large``, ``too_deep`` or ``bad_json``; ``message`` one sentence."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def too_deep(value) -> bool:
    """Whether parsed JSON nests deeper than ``MAX_DEPTH``: a walk over its containers
    only (an agent frame of 64 readings has a few hundred), stopping at the first too deep."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > MAX_DEPTH:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, dict | list):
                stack.append((child, level + 1))
    return False


def check(text: str | bytes, *, max_bytes: int) -> None:
    """Refuse ``text`` before parsing if it is larger than ``max_bytes``."""
    if len(text) > max_bytes:
        raise JsonRefused("too_large", f"the document is {len(text)} bytes; at most {max_bytes} are allowed")


def loads(text: str | bytes, *, max_bytes: int, parse_constant=None):
    """``json.loads`` behind the size and depth checks; every failure is ``JsonRefused``."""
    check(text, max_bytes=max_bytes)
    try:
        value = json.loads(text, parse_constant=parse_constant)
    except RecursionError:  # far past MAX_DEPTH: the C parser gave up first
        raise JsonRefused("too_deep", f"the document nests deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise JsonRefused("bad_json", "the document is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise JsonRefused("bad_json", f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    except ValueError as exc:  # an integer of over 4,300 digits, a refused constant
        raise JsonRefused("bad_json", f"not acceptable JSON ({str(exc)[:120]})") from None
    if isinstance(value, dict | list) and too_deep(value):
        raise JsonRefused("too_deep", f"the document nests deeper than {MAX_DEPTH} levels")
    return value


# Text no database column can hold: NUL (PostgreSQL text refuses U+0000) and UTF-16
# surrogates, which JSON's ``\ud800`` escapes can carry alone (a pair is joined into one
# character by the parser, so any surrogate left is a lone one) and which no encoder
# writes as UTF-8 — echoed in an error message, they broke the response itself.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
SURROGATES = re.compile("[\ud800-\udfff]")
NUL_MESSAGE = "A NUL character (U+0000) is not allowed."
SURROGATE_MESSAGE = "A lone UTF-16 surrogate (U+D800 to U+DFFF) is not text and is not allowed."


def _why(text: str, refuse: re.Pattern) -> str | None:
    found = refuse.search(text)
    if found is None:
        return None
    return NUL_MESSAGE if found[0] == "\x00" else SURROGATE_MESSAGE


def find_unstorable(value, path: str = "", *, refuse: re.Pattern = _UNSTORABLE) -> tuple[str, str] | None:
    """(path, why) for the first key or string in parsed JSON holding a NUL or a lone
    surrogate (``refuse``: only those it matches) — path like ``items[2].name`` ("" is
    the document itself), with those characters taken out of it — or None when none does."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if (why := _why(item, refuse)) is not None:
                return where, why
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and (why := _why(key, refuse)) is not None:
                    return _UNSTORABLE.sub("", name), why
                stack.append((child, name))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return None
