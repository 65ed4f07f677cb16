"""Navigation links to the other apps' sections, by what the user's roles let them see."""

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

register = template.Library()

# (url name, label, which shell flag must be true)
SECTIONS = [
    ("scaling-group-list", "Scaling", None),
    ("image-list", "Images", None),
    ("alert-list", "Alerts", None),
    ("job-queue", "Jobs", None),
    ("vpc-list", "Network", None),
    ("cost-explorer", "Costs", "sees_costs"),
    ("invoice-list", "Invoices", "sees_bills"),
    ("savings", "Savings", "is_admin"),
    ("audit-events", "Audit", "is_auditor"),
    ("team-members", "Team", "in_team"),
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
        here = current.startswith(name.split("-")[0])
        attrs = mark_safe(' aria-current="page"') if here else ""
        links.append(format_html('<a href="{}"{}>{}</a>', reverse(name), attrs, label))
    return mark_safe("\n".join(links))
