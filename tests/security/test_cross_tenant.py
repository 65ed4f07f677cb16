"""The cross-tenant matrix, generated from the OpenAPI schema and the URLconf: every API
detail and action and every page that takes an id, requested by every Acme role with
Globex's ids, answers 403 or 404 and writes nothing; no Acme list shows a Globex object."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.test import Client
from django.urls import get_resolver
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from billing import invoices as billing_invoices
from console.models import Membership

pytestmark = pytest.mark.django_db

API = "/api/v1/"
PARAM = re.compile(r"\{([^}]+)\}")
# Tables a refused request may touch: the audit log records denials, sessions log users in.
BOOKKEEPING = {"audit_auditevent", "audit_chainhead", "audit_checkpoint", "audit_refusaltally",
               "django_session", "console_usersession", "axes_accessattempt", "axes_accesslog"}


def _operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, operations in schema["paths"].items():
        for method in operations:
            if method in ("get", "post", "put", "patch", "delete"):
                yield method, path


OPERATIONS = list(_operations())
LISTS = sorted({path for method, path in OPERATIONS if method == "get" and "{" not in path})
WITH_IDS = [(method, path) for method, path in OPERATIONS if "{" in path]


def _collection(path):
    """The list path an id-taking path belongs to: /api/v1/instances/{id}/stop/ → /api/v1/instances/."""
    return path[: path.index("{")]


@pytest.fixture
def world(api, alice, bob, charlie, ops, acme, globex, acme_instance, globex_instance, fleet):
    auditor = _auditor(acme)
    month = timezone.now().date().replace(day=1)  # the server's month is UTC
    for who, team in ((alice, acme), (charlie, globex)):
        client = api(who)
        assert client.post(API + "budgets/", {"team": team.pk, "month": f"{month:%Y-%m}", "amount": "1000.00"}).status_code == 201
        start = (timezone.now() + timedelta(days=2)).isoformat()
        assert client.post(API + "reservations/", {"team": team.pk, "gpu_model": "H100-80GB", "gpu_count": 1,
                                                    "term": "1y", "start": start}).status_code == 201
        client.post(API + "auth/tokens/", {"name": f"{who.username}-token"})
        assert client.post(API + "jobs/", {"team": team.pk, "name": "eval", "command": "python eval.py",
                                            "gpu_model": "H100-80GB", "gpu_count": 1, "priority": "normal"},
                           format="json").status_code == 201
        billing_invoices.add_adjustment(actor=ops, team=team, amount=Decimal("-5.00"), reason="credit")
        billing_invoices.refresh_invoice(team_id=team.pk, month=month, now=timezone.now())
        _network(who, team, acme_instance if team == acme else globex_instance)
    return {"member": bob, "admin": alice, "auditor": auditor}


def _network(who, team, instance):
    """The team's default network, a group with a rule, and an interface for its instance."""
    from network import interfaces as network_interfaces
    from network import security_groups as network_security_groups
    from network import vpcs as network_vpcs

    network_vpcs.ensure_defaults(actor=who, team=team)
    group = network_security_groups.create_group(actor=who, team=team, name="web")
    network_security_groups.add_rule(actor=who, group=group, direction="inbound", protocol="tcp", port_from=443, cidr="10.0.0.0/8")
    network_interfaces.attach_instance(actor=who, instance=instance, groups=[group.pk])


def _auditor(acme):
    from django.contrib.auth.models import User

    user = User.objects.create_user("aud", "aud@example.com", "demo-password")
    Membership.objects.create(team=acme, user=user, role="auditor")
    return user


def _ids(client, path) -> dict[str, set]:
    """Every value of every field of the list's objects, by field name (id, uuid, seq …)."""
    response = client.get(path, {"page_size": 500})
    if response.status_code != 200 or not response["Content-Type"].startswith("application/json"):
        return {}
    body = response.json()
    rows = body["results"] if isinstance(body, dict) and "results" in body else body
    out: dict[str, set] = {}
    for row in rows if isinstance(rows, list) else []:
        for key, value in row.items():
            if isinstance(value, int | str) and not isinstance(value, bool):
                out.setdefault(key, set()).add(str(value))
    return out


def _row_counts() -> dict[str, int]:
    counts = {}
    for model in apps.get_models():
        table = model._meta.db_table
        if table not in BOOKKEEPING and not model._meta.proxy:
            counts[table] = model._default_manager.count()
    return counts


def _globex_only(api, charlie, user, path, field) -> set:
    theirs = _ids(api(charlie), path).get(field, set())
    ours = _ids(api(user), path).get(field, set())
    return theirs - ours


def test_the_matrix(api, world, charlie):
    covered = set()
    failures = []
    for role, user in world.items():
        client = api(user)
        for method, path in WITH_IDS:
            params = PARAM.findall(path)
            field = params[-1]
            foreign = _globex_only(api, charlie, user, _collection(path), field)
            if not foreign:
                continue
            before = _row_counts()
            for ident in sorted(foreign)[:2]:
                url = PARAM.sub(ident, path)
                response = getattr(client, method)(url, {}, format="json")
                if response.status_code not in (403, 404):
                    failures.append(f"{role} {method.upper()} {url}: {response.status_code}")
                covered.add((method, path))
            after = _row_counts()
            if after != before:
                changed = {t: (before[t], after[t]) for t in before if before[t] != after[t]}
                failures.append(f"{role} {method.upper()} {path} wrote {changed}")
    assert not failures, "\n".join(failures)
    # The matrix is only as good as its reach: every tenant resource with ids must be in it.
    reached = {_collection(p) for _, p in covered}
    for resource in ("instances", "budgets", "reservations", "invoices", "teams", "members", "audit/events", "jobs",
                     "vpcs", "subnets", "security-groups", "network-interfaces"):
        assert API + resource + "/" in reached, f"no Globex {resource} reached: {sorted(reached)}"


@pytest.mark.parametrize("path", LISTS)
def test_no_acme_list_shows_globex(api, world, charlie, path):
    for role, user in world.items():
        ids = _ids(api(user), path).get("team", set())
        assert str(charlie.memberships.get().team_id) not in ids, f"{role} sees Globex rows in {path}"


def _page_patterns():
    """Pages (not /api/) whose URL takes an id, from the URLconf, with the API list that
    holds the same objects."""
    same_as = {"instances": "instances", "invoices": "invoices", "budgets": "budgets", "audit": "audit/events",
               "gpus": "gpus", "monitoring/gpus": "gpus", "monitoring/instances": "instances", "alerts": "alerts",
               "jobs": "jobs", "networks": "vpcs", "security-groups": "security-groups",
               "network-interfaces": "network-interfaces"}
    for pattern in get_resolver().url_patterns:
        for sub in getattr(pattern, "url_patterns", [pattern]):
            route = str(sub.pattern)
            if route.startswith("api/") or "<" not in route:
                continue
            prefix = route[: route.index("<")].rstrip("/")
            if prefix in same_as:
                yield route, same_as[prefix]


PAGES = list(_page_patterns())


@pytest.mark.parametrize(("route", "resource"), PAGES, ids=[p[0] for p in PAGES])
def test_pages_with_another_teams_id(api, world, charlie, route, resource):
    converters = re.findall(r"<(?:\w+:)?(\w+)>", route)
    field = {"pk": "id", "seq": "seq", "uuid": "uuid"}.get(converters[0], "id")
    for role, user in world.items():
        foreign = _globex_only(api, charlie, user, API + resource + "/", field)
        if resource in ("instances", "invoices", "budgets", "audit/events", "jobs", "vpcs", "security-groups"):
            assert foreign, f"no Globex {resource} to try as {role}"
        client = Client()
        client.force_login(user)
        before = _row_counts()
        for ident in sorted(foreign)[:2]:
            url = "/" + re.sub(r"<(?:\w+:)?pk>|<(?:\w+:)?seq>|<(?:\w+:)?uuid>", ident, route, count=1)
            url = re.sub(r"<(?:\w+:)?\w+>", "stop", url)  # an action's verb
            for method in ("get", "post"):
                response = getattr(client, method)(url)
                assert response.status_code in (403, 404, 405), f"{role} {method.upper()} {url}: {response.status_code}"
        assert _row_counts() == before
