"""One valid request per mutating endpoint, by a user allowed to make it, and the audit
events it must write. Keyed by "METHOD /route/" as endpoint_walk.py spells it; several
variants per endpoint are allowed (e.g. each verb of the instance action page)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from console import services as console_services
from instances import services as instance_services
from instances.models import Host, Region


@dataclass
class World:
    users: dict
    acme: object
    globex: object
    fleet: dict
    launch: Callable


@dataclass
class Recipe:
    call: Callable  # (client, world, prepared) -> response
    actions: tuple[str, ...]
    actor: str | None  # who makes the request (logged in unless login=False)
    prepare: Callable | None = None  # (world) -> whatever call needs, made before counting
    status: tuple[int, ...] = (200, 201, 204, 302)
    outcome: str = "success"
    team: str | None = None  # "acme" / "globex": the events must carry that team
    login: bool = True
    identity: tuple[str, str] | None = None  # (actor_type, actor_name) when not the user
    known_gap: str = ""  # xfail (strict) until the owning app audits it
    targeted: bool = True  # False for events about no object (a failed sign-in)

    def actor_identity(self) -> tuple[str, str]:
        return self.identity or ("user", self.actor)


def _json(method: str, url: str, body: dict | None = None):
    def call(client, world, prepared):
        target = url.format(p=prepared) if prepared is not None else url
        payload = body(world, prepared) if callable(body) else body
        return getattr(client, method)(target, json.dumps(payload or {}), content_type="application/json")

    return call


def _form(url: str, body: dict | Callable | None = None, method: str = "post"):
    def call(client, world, prepared):
        target = url.format(p=prepared) if prepared is not None else url
        payload = body(world, prepared) if callable(body) else (body or {})
        return getattr(client, method)(target, payload)

    return call


def _running(world: World, name="walk-job", pricing="on_demand"):
    instance = world.launch(world.users["bob"], world.acme, name=name, pricing=pricing)
    return instance_services.mark_running(instance=instance)


def _stopped(world: World):
    instance = _running(world)
    instance_services.stop_instance(actor=world.users["bob"], instance=instance, finish=False)
    return instance_services.finish_stop(instance=instance)


def _token(world: World):
    return console_services.create_api_token(actor=world.users["bob"], user=world.users["bob"], name="walk")[0]


def _membership(world: World):
    return world.users["bob"].memberships.get(team=world.acme)


def _host(world: World):
    return Host.objects.get(name="h100-a")


def _region(world: World):
    return Region.objects.get()


RECIPES: dict[str, dict[str, Recipe]] = {
    # --- console: sign-in, tokens, teams, members ---------------------------------
    "POST /login/": {"": Recipe(
        _form("/login/", {"username": "bob", "password": "demo-password"}), ("auth.login",), "bob", login=False,
    )},
    "PUT /login/": {"": Recipe(  # Django's LoginView treats PUT as POST; with no form data it fails
        _form("/login/", method="put"), ("auth.login_failed",), None, login=False, status=(200,),
        outcome="failure", identity=("anonymous", "anonymous"), targeted=False,
    )},
    "POST /logout/": {"": Recipe(_form("/logout/"), ("auth.logout",), "bob")},
    "POST /account/tokens/": {
        "create": Recipe(_form("/account/tokens/", {"name": "ci"}), ("api_token.create",), "bob"),
        "revoke": Recipe(
            _form("/account/tokens/", lambda w, t: {"revoke": t.pk}), ("api_token.revoke",), "bob", prepare=_token,
        ),
    },
    "POST /api/v1/auth/token/": {"": Recipe(  # signs in and creates a token: two changes
        _json("post", "/api/v1/auth/token/", {"username": "bob", "password": "demo-password", "name": "cli"}),
        ("auth.login", "api_token.create"), "bob", login=False,
    )},
    "POST /api/v1/auth/tokens/<pk>/revoke/": {"": Recipe(
        _json("post", "/api/v1/auth/tokens/{p.pk}/revoke/"), ("api_token.revoke",), "bob", prepare=_token,
    )},
    "POST /api/v1/teams/": {"": Recipe(_json("post", "/api/v1/teams/", {"name": "Initech"}), ("team.create",), "ops")},
    "POST /api/v1/members/": {"": Recipe(
        _json("post", "/api/v1/members/", lambda w, _: {"team": w.acme.pk, "username": "charlie", "role": "member"}),
        ("member.add",), "alice", team="acme",
    )},
    "PATCH /api/v1/members/<pk>/": {"": Recipe(
        _json("patch", "/api/v1/members/{p.pk}/", {"role": "admin"}), ("member.change_role",), "alice",
        prepare=_membership, team="acme",
    )},
    "DELETE /api/v1/members/<pk>/": {"": Recipe(
        _json("delete", "/api/v1/members/{p.pk}/"), ("member.remove",), "alice", prepare=_membership, team="acme",
    )},
    # --- instances: fleet and lifecycle -----------------------------------------------
    "POST /api/v1/hosts/": {"": Recipe(
        _json("post", "/api/v1/hosts/", {"name": "h100-c", "region": "us-east-1", "kind": "passthrough"}),
        ("host.register",), "ops",
    )},
    "PATCH /api/v1/hosts/<pk>/": {"": Recipe(
        _json("patch", "/api/v1/hosts/{p.pk}/", {"state": "draining"}), ("host.update",), "ops", prepare=_host,
    )},
    "POST /api/v1/instances/": {"": Recipe(
        _json("post", "/api/v1/instances/", lambda w, _: {
            "team": w.acme.pk, "name": "api-job", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand",
        }),
        ("instance.launch",), "bob", team="acme",
    )},
    "POST /api/v1/instances/<pk>/start/": {"": Recipe(
        _json("post", "/api/v1/instances/{p.pk}/start/"), ("instance.start",), "bob", prepare=_stopped, team="acme",
    )},
    "POST /api/v1/instances/<pk>/stop/": {"": Recipe(
        _json("post", "/api/v1/instances/{p.pk}/stop/"), ("instance.stop",), "bob", prepare=_running, team="acme",
    )},
    "POST /api/v1/instances/<pk>/terminate/": {"": Recipe(
        _json("post", "/api/v1/instances/{p.pk}/terminate/"), ("instance.terminate",), "bob", prepare=_running,
        team="acme",
    )},
    "POST /instances/new/": {"": Recipe(
        _form("/instances/new/", lambda w, _: {
            "team": w.acme.pk, "name": "page-job", "gpu_model": "H100-80GB", "gpu_count": 1,
            "pricing_model": "on_demand",
        }),
        ("instance.launch",), "bob", team="acme",
    )},
    "POST /instances/<pk>/<verb>/": {
        "stop": Recipe(_form("/instances/{p.pk}/stop/"), ("instance.stop",), "bob", prepare=_running, team="acme"),
        "start": Recipe(_form("/instances/{p.pk}/start/"), ("instance.start",), "bob", prepare=_stopped, team="acme"),
        "terminate": Recipe(
            _form("/instances/{p.pk}/terminate/"), ("instance.terminate",), "bob", prepare=_running, team="acme",
        ),
    },
    # --- audit ----------------------------------------------------------------------
    "POST /audit/verify/": {"": Recipe(_form("/audit/verify/"), ("audit.verify",), "audrey")},
}
