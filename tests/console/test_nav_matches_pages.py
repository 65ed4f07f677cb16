"""The navigation shows a role exactly the pages it may open: for each of member,
admin, auditor and operator, a section is linked if and only if its page answers 200.
Auditors read everything of their teams (costs, invoices, budgets, team) read-only."""

import re

import pytest
from django.urls import reverse

from console.templatetags.console_tags import SECTIONS

PAGES = [name for name, _, _ in SECTIONS] + ["host-list"]
BILLING_TABS = ["cost-explorer", "invoice-list", "budget-list", "reservation-list", "price-list"]


def links(html: str, label: str) -> set[str]:
    nav = re.search(rf'<nav[^>]*aria-label="{label}"[^>]*>(.*?)</nav>', html, re.S).group(1)
    return {href.split("?")[0] for href in re.findall(r'href="([^"]+)"', nav)}


def opens(client, url: str) -> bool:
    status = client.get(url).status_code
    assert status in (200, 302, 403, 404), (url, status)
    return status == 200


@pytest.mark.parametrize("who", ["bob", "alice", "audrey", "ops"])
def test_the_nav_links_exactly_the_pages_that_open(client, who, request, acme_instance):
    client.force_login(request.getfixturevalue(who))
    shown = links(client.get("/").content.decode(), "Main")
    for name in PAGES:
        url = reverse(name)
        assert (url in shown) == opens(client, url), f"{who}: {url} linked={url in shown}"


@pytest.mark.parametrize("who", ["bob", "alice", "audrey", "ops"])
def test_the_billing_tabs_link_exactly_the_pages_that_open(client, who, request, acme_instance):
    client.force_login(request.getfixturevalue(who))
    shown = links(client.get("/costs/").content.decode(), "Billing")
    for name in BILLING_TABS:
        url = reverse(name)
        assert (url in shown) == opens(client, url), f"{who}: {url} linked={url in shown}"


def test_an_auditor_reads_costs_invoices_budgets_and_the_team(client, audrey):
    client.force_login(audrey)
    shown = links(client.get("/").content.decode(), "Main")
    assert {reverse("cost-explorer"), reverse("invoice-list"), reverse("team-members"), reverse("audit-events")} <= shown
