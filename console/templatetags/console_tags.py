"""Navigation links to the sections of the other apps, shown only when their pages exist."""

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html_join

register = template.Library()

# (url name, label, which shell flag must be true)
SECTIONS = [
    ("alert-list", "Alerts", None),
    ("cost-explorer", "Costs", "sees_costs"),
    ("invoice-list", "Invoices", "is_admin"),
    ("audit-events", "Audit", "is_auditor"),
]


@register.simple_tag(takes_context=True)
def section_links(context):
    shell = context.get("shell") or {}
    request = context.get("request")
    current = getattr(getattr(request, "resolver_match", None), "url_name", "") or ""
    links = []
    for name, label, flag in SECTIONS:
        if flag and not shell.get(flag):
            continue
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        prefix = name.split("-")[0]
        links.append((url, ' aria-current="page"' if current.startswith(prefix) else "", label))
    return format_html_join("\n", '<a href="{}"{}>{}</a>', ((u, _Safe(c), label) for u, c, label in links))


class _Safe(str):
    def __html__(self):
        return self
