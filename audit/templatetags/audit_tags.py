import json

from django import template

register = template.Library()


@register.filter
def compact_json(value, limit: int = 160) -> str:
    """Details on one line, cut at ``limit`` characters (autoescaped by the template)."""
    text = json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=True)


def _cell(value) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False)


@register.filter
def details_rows(value, limit: int = 0) -> list[tuple[str, str]]:
    """Details as (key, value) rows for a small table: top-level keys in order, nested
    values as compact JSON; with ``limit``, at most that many rows plus an ellipsis row."""
    if not isinstance(value, dict):
        return [("", _cell(value))] if value not in (None, "", [], {}) else []
    rows = [(str(k), _cell(v)) for k, v in sorted(value.items())]
    if limit and len(rows) > limit:
        rows = rows[:limit] + [("…", f"{len(rows) - limit} more")]
    return rows


@register.filter
def short_type(value: str) -> str:
    """``instances.instance`` -> ``instance``: the model, without its app."""
    return value.rpartition(".")[2]
