"""Every URL that accepts POST, PUT, PATCH or DELETE writes exactly the audit events its
recipe names (one, unless it makes two changes) with every required field filled in.

The URL configuration is walked at collection time, so an endpoint added later and
given no recipe fails here: add one to RECIPES (a valid request by a permitted user).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import timedelta

import pytest
from audit_support import events_after, head_seq
from django.test import Client
from django.utils import timezone
from endpoint_recipes import RECIPES, Recipe, World
from endpoint_walk import endpoints

from audit import hashing

USER_AGENT = "audit-walker/1.0"
_ids = itertools.count(1)


def _cases():
    for endpoint in endpoints():
        variants = RECIPES.get(endpoint.key) or {"": None}
        for variant, recipe in variants.items():
            gap = (
                [pytest.mark.xfail(reason=recipe.known_gap, strict=True)]
                if recipe and recipe.known_gap
                else []
            )
            yield pytest.param(
                endpoint, variant, id=f"{endpoint.key}{' ' + variant if variant else ''}", marks=gap
            )


@dataclass
class Run:
    response: object
    request_id: str


@pytest.fixture
def world(db, alice, bob, charlie, audrey, ops, acme, globex, fleet, launch):
    return World(
        users={u.username: u for u in (alice, bob, charlie, audrey, ops)},
        acme=acme,
        globex=globex,
        fleet=fleet,
        launch=launch,
    )


def _client(world: World, recipe: Recipe) -> tuple[Client, str]:
    request_id = f"walk-{next(_ids)}"
    client = Client(
        HTTP_USER_AGENT=USER_AGENT, HTTP_X_REQUEST_ID=request_id, REMOTE_ADDR="198.51.100.20"
    )
    if recipe.actor and recipe.login:
        client.force_login(world.users[recipe.actor])
    return client, request_id


@pytest.mark.parametrize(("endpoint", "variant"), list(_cases()))
def test_the_endpoint_writes_its_audit_events(world, endpoint, variant):
    recipe = RECIPES.get(endpoint.key, {}).get(variant)
    if recipe is None:
        pytest.fail(
            f"No audit recipe for {endpoint.key} (url name {endpoint.name!r}). Add one to RECIPES in "
            "tests/audit/endpoint_recipes.py: a valid request by a permitted user and the audit "
            "event(s) it must write."
        )
    context = recipe.prepare(world) if recipe.prepare else None
    client, request_id = _client(world, recipe)
    before = head_seq()
    response = recipe.call(client, world, context)
    assert response.status_code in recipe.status, (
        response.status_code,
        getattr(response, "content", b"")[:500],
    )
    written = events_after(before)
    assert [e.action for e in written] == list(recipe.actions), "one state change, one audit event"
    now = timezone.now()
    for event in written:
        assert now - timedelta(minutes=1) < event.time <= now
        assert (event.actor_type, event.actor_name) == recipe.actor_identity()
        assert event.outcome == recipe.outcome
        assert (event.source_ip, event.user_agent, event.request_id) == (
            "198.51.100.20",
            USER_AGENT,
            request_id,
        )
        if recipe.targeted:
            assert event.target_type and event.target_id, "the event names what it changed"
        if recipe.team:
            assert event.team_id == getattr(world, recipe.team).pk
        assert event.hash == hashing.chain_hash(event, event.prev_hash)


def test_every_recipe_still_has_its_endpoint():
    live = {e.key for e in endpoints()}
    assert sorted(set(RECIPES) - live) == [], "recipes for endpoints that no longer exist"
