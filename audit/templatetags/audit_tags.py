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
