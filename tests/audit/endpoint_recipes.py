"""One valid request per mutating endpoint, by a user allowed to make it, and the audit
events it must write. Keyed by "METHOD /route/" as endpoint_walk.py spells it; several
variants per endpoint are allowed (e.g. each verb of the instance action page)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from alerting import services as alerting_services
from alerting.alerts import Condition, raise_alert
from billing import budgets as billing_budgets
from billing import invoices as billing_invoices
from billing import price_changes as billing_price_changes
from billing.models import Invoice
from console import services as console_services
from instances import images as image_services
from instances import lifecycle as instance_lifecycle
from instances.models import GpuModel, Host, Region
from jobs import submission as job_submission
from monitoring import services as monitoring_services
from network import interfaces as network_interfaces
from network import security_groups as network_security_groups
from network import vpcs as network_vpcs
from scaling import services as scaling_services


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
        return getattr(client, method)(
            target, json.dumps(payload or {}), content_type="application/json"
        )

    return call


def _form(url: str, body: dict | Callable | None = None, method: str = "post"):
    def call(client, world, prepared):
        target = url.format(p=prepared) if prepared is not None else url
        payload = body(world, prepared) if callable(body) else (body or {})
        return getattr(client, method)(target, payload)

    return call


def _running(world: World, name="walk-job", pricing="on_demand"):
    instance = world.launch(world.users["bob"], world.acme, name=name, pricing=pricing)
    return instance_lifecycle.mark_running(instance=instance)


def _stopped(world: World):
    instance = _running(world)
    instance_lifecycle.stop_instance(actor=world.users["bob"], instance=instance, finish=False)
    return instance_lifecycle.finish_stop(instance=instance)


def _stopping(world: World):
    instance = _running(world)
    return instance_lifecycle.stop_instance(actor=world.users["bob"], instance=instance, finish=False)


def _token(world: World):
    return console_services.create_api_token(
        actor=world.users["bob"], user=world.users["bob"], name="walk"
    )[0]


def _membership(world: World):
    return world.users["bob"].memberships.get(team=world.acme)


def _host(world: World):
    return Host.objects.get(name="h100-a")


def _cordoned_host(world: World):
    from instances import cordon

    return cordon.cordon_host(actor=world.users["ops"], host=_host(world), reason="walk")


def _cordoned_gpu(world: World):
    from instances import cordon
    from instances.models import Gpu

    return cordon.cordon_gpu(actor=world.users["ops"], gpu=Gpu.objects.get(uuid="GPU-h100-a-0"), reason="walk")


def _region(world: World):
    return Region.objects.get()


def _acme_network(world: World):
    """Acme's default VPC, subnet and group (a team's first launch makes them)."""
    return network_vpcs.ensure_defaults(actor=world.users["bob"], team=world.acme)


def _dismissed_advice(world: World):
    from savings import services as savings_services

    instance = _running(world)
    savings_services.dismiss(actor=world.users["alice"], instance=instance, kind="stop")
    return instance


def _idle_policy(world: World):
    from savings import idle_stop

    return idle_stop.set_policy(actor=world.users["alice"], team=world.acme, idle_minutes=60)


def _vpc(world: World):
    return network_vpcs.create_vpc(actor=world.users["bob"], team=world.acme, name="walk", cidr="10.77.0.0/16")


def _subnet(world: World):
    return network_vpcs.create_subnet(actor=world.users["bob"], vpc=_vpc(world), name="walk", cidr="10.77.1.0/24")


def _security_group(world: World):
    return network_security_groups.create_group(actor=world.users["bob"], team=world.acme, name="walk", rules=[])


def _security_rule(world: World):
    group = _security_group(world)
    return network_security_groups.add_rule(actor=world.users["bob"], group=group, direction="inbound", protocol="tcp",
                                     port_from=22, cidr="10.0.0.0/8")


def _interface(world: World):
    """A running instance's interface (``pk``) and another group of its team (``group``)."""
    from types import SimpleNamespace

    _acme_network(world)
    with network_interfaces.on_network(actor=world.users["bob"], team=world.acme):
        instance = _running(world, name="walk-net")
    return SimpleNamespace(pk=instance.interface.pk, group=_security_group(world).pk)


def _spot(world: World):
    return _running(world, name="spot-job", pricing="spot")


def _host_token(world: World):
    return monitoring_services.create_host_token(
        actor=world.users["ops"], host=_host(world), name="agent"
    )[0]


def _alert(world: World):
    return raise_alert(
        "temperature",
        Condition(key="temperature:walk", message="GPU at 91 C", value=91, team_id=world.acme.pk),
    )


def _enrolled(world: World):
    from console import twofactor

    bob = world.users["bob"]
    device = twofactor.pending_device(bob)
    twofactor.confirm_enrolment(actor=bob, user=bob, code=_totp(device))
    return device


def _totp(device, steps_ahead=0) -> str:
    import time

    from django_otp.oath import TOTP

    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() + steps_ahead * device.step
    return f"{totp.token():06d}"


def _second_step(client, world, device):
    client.post("/login/", {"username": "bob", "password": "demo-password"})
    return client.post("/login/verify/", {"code": _totp(device, 1)})


def _enrol_at_sign_in(client, world, prepared):
    import time

    from console import twofactor
    from console.signin import PENDING

    bob = world.users["bob"]
    session = client.session
    session[PENDING] = {"user": bob.pk, "backend": "django.contrib.auth.backends.ModelBackend",
                        "at": time.time(), "next": "/", "tries": 0}
    session.save()
    client.get("/login/enrol/")
    return client.post("/login/enrol/", {"code": _totp(twofactor.pending_device(bob))})


def _enrol_from_account(client, world, prepared):
    from console import twofactor

    client.get("/account/two-factor/enrol/")
    return client.post("/account/two-factor/enrol/", {"code": _totp(twofactor.pending_device(world.users["bob"]))})


def _invitation(world: World):
    return console_services.invite_member(
        actor=world.users["alice"], team=world.acme, email="dana@example.com", role="member",
        accept_url=lambda raw: f"/invite/{raw}/",
    )


def _invitation_for_charlie(world: World):
    return console_services.invite_member(
        actor=world.users["alice"], team=world.acme, email=world.users["charlie"].email, role="member",
        accept_url=lambda raw: f"/invite/{raw}/",
    )


def _rule(world: World):
    return alerting_services.create_rule(
        actor=world.users["alice"], team=world.acme, name="walk rule", metric="gpu_util", threshold=90, hold_s=5
    )


def _channel(world: World):
    return alerting_services.create_channel(
        actor=world.users["alice"], team=world.acme, name="walk", kind="email", target="oncall@acme.test"
    )


def _silence(world: World):
    return alerting_services.silence(
        actor=world.users["alice"], rule=_rule(world), ends_at=timezone.now() + timedelta(hours=1)
    )


def _until(world, prepared) -> dict:
    return {"ends_at": (timezone.now() + timedelta(hours=1)).isoformat()}


def _this_month() -> date:
    return timezone.now().date().replace(day=1)


def _budget(world: World):
    return billing_budgets.create_budget(
        actor=world.users["alice"], team=world.acme, month=_this_month(), amount=Decimal("1000")
    )


def _invoice(world: World, months_ago: int = 0) -> Invoice:
    start = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    for _ in range(months_ago):
        start = (start - timedelta(days=1)).replace(day=1)
    end = (start + timedelta(days=32)).replace(day=1)
    return Invoice.objects.create(
        team=world.acme, month=start.date(), period_start=start, period_end=end
    )


def _issued_invoice(world: World) -> Invoice:
    return billing_invoices.issue_invoice(
        actor=world.users["ops"], invoice=_invoice(world, months_ago=1)
    )


def _priced(world: World):
    now = timezone.now()
    billing_price_changes.set_price(
        actor=world.users["ops"],
        sku="H100-80GB",
        kind="on_demand",
        hourly=Decimal("2"),
        effective_from=now,
        now=now,
    )


def _later(hours: int = 2) -> str:
    return (timezone.now() + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M")



def _image(world: World):
    return image_services.create_image(
        actor=world.users["ops"], name="walk-image", reference="nvcr.io/nvidia/pytorch:24.10-py3",
        gpu_models=[world.fleet["h100"]],
    )


def _idle_job(world: World):
    """A low-priority job, queued (the idle-capacity price is set first)."""
    since = datetime(2000, 1, 1, tzinfo=UTC)
    billing_price_changes.set_price(actor="system", sku="H100-80GB", kind="idle", hourly="0.25",
                               effective_from=since, now=since)
    return job_submission.submit_job(
        actor=world.users["bob"], team=world.acme, name="walk-job", command="python train.py",
        gpu_model=GpuModel.objects.get(name="H100-80GB"), gpu_count=1,
    )


def _group(world: World):
    return scaling_services.create_group(
        actor=world.users["alice"], team=world.acme, name="walk-group", gpu_model=world.fleet["h100"],
        gpus_per_instance=1, max_instances=2, target_per_instance=10,
    )


RECIPES: dict[str, dict[str, Recipe]] = {
    # --- images, scaling groups, jobs ----------------------------------------------
    "POST /api/v1/images/": {
        "": Recipe(
            _json("post", "/api/v1/images/", lambda w, _: {
                "team": w.acme.pk, "name": "walk-own", "reference": "registry.acme.example/ml/train:2.0",
                "gpu_models": ["H100-80GB"],
            }),
            ("image.create",), "alice", team="acme",
        )
    },
    "POST /api/v1/images/<pk>/make-default/": {
        "": Recipe(
            _json("post", "/api/v1/images/{p.pk}/make-default/", {"gpu_model": "H100-80GB"}),
            ("image.default",), "ops", prepare=_image,
        )
    },
    "POST /api/v1/images/<pk>/retire/": {
        "": Recipe(_json("post", "/api/v1/images/{p.pk}/retire/"), ("image.retire",), "ops", prepare=_image)
    },
    "POST /images/": {
        "": Recipe(
            _form("/images/", lambda w, _: {
                "owner": str(w.acme.pk), "name": "walk-form", "reference": "registry.acme.example/ml/eval:1.0",
                "gpu_models": ["H100-80GB"],
            }),
            ("image.create",), "alice", team="acme",
        )
    },
    "POST /images/<pk>/retire/": {
        "": Recipe(_form("/images/{p.pk}/retire/"), ("image.retire",), "ops", prepare=_image)
    },
    "POST /api/v1/scaling-groups/": {
        "": Recipe(
            _json("post", "/api/v1/scaling-groups/", lambda w, _: {
                "team": w.acme.pk, "name": "walk-api-group", "gpu_model": "H100-80GB", "gpus_per_instance": 1,
                "max_instances": 2, "target_per_instance": 10,
            }),
            ("scaling_group.create",), "alice", team="acme",
        )
    },
    "PATCH /api/v1/scaling-groups/<pk>/": {
        "": Recipe(
            _json("patch", "/api/v1/scaling-groups/{p.pk}/", {"max_instances": 3}),
            ("scaling_group.update",), "alice", prepare=_group, team="acme",
        )
    },
    "DELETE /api/v1/scaling-groups/<pk>/": {
        "": Recipe(_json("delete", "/api/v1/scaling-groups/{p.pk}/"), ("scaling_group.delete",), "alice",
                   prepare=_group, team="acme")
    },
    "POST /scaling-groups/new/": {
        "": Recipe(
            _form("/scaling-groups/new/", lambda w, _: {
                "team": str(w.acme.pk), "name": "walk-form-group", "gpu_model": "H100-80GB", "gpus_per_instance": "1",
                "pricing_model": "on_demand", "min_instances": "1", "max_instances": "2", "metric_source": "pushed",
                "target_per_instance": "10", "scale_out_cooldown_s": "60", "scale_in_cooldown_s": "120",
            }),
            ("scaling_group.create",), "alice", team="acme",
        )
    },
    "POST /scaling-groups/<pk>/edit/": {
        "": Recipe(
            _form("/scaling-groups/{p.pk}/edit/", lambda w, _: {
                "gpu_model": "H100-80GB", "gpus_per_instance": "1", "pricing_model": "on_demand", "min_instances": "1",
                "max_instances": "3", "metric_source": "pushed", "target_per_instance": "10",
                "scale_out_cooldown_s": "120", "scale_in_cooldown_s": "300",
            }),
            ("scaling_group.update",), "alice", prepare=_group, team="acme",
        )
    },
    "POST /scaling-groups/<pk>/delete/": {
        "": Recipe(_form("/scaling-groups/{p.pk}/delete/"), ("scaling_group.delete",), "alice", prepare=_group,
                   team="acme")
    },
    "POST /api/v1/scaling-groups/<pk>/metrics/": {
        "": Recipe(
            _json("post", "/api/v1/scaling-groups/{p.pk}/metrics/", {"queue_depth": 0}),
            (), "bob", prepare=_group, team="acme",
        )
    },
    "POST /api/v1/jobs/": {
        "": Recipe(
            _json("post", "/api/v1/jobs/", lambda w, _: {
                "team": w.acme.pk, "name": "walk-api-job", "command": "python eval.py", "gpu_model": "H100-80GB",
                "gpu_count": 1, "priority": "normal",
            }),
            ("job.submit",), "bob", team="acme",
        )
    },
    "POST /api/v1/jobs/<pk>/cancel/": {
        "": Recipe(_json("post", "/api/v1/jobs/{p.pk}/cancel/"), ("job.cancel",), "bob", prepare=_idle_job,
                   team="acme")
    },
    "POST /jobs/": {
        "": Recipe(
            _form("/jobs/", lambda w, _: {
                "team": str(w.acme.pk), "name": "walk-form-job", "command": "python eval.py",
                "gpu_model": "H100-80GB", "gpu_count": "1", "priority": "normal",
            }),
            ("job.submit",), "bob", team="acme",
        )
    },
    "POST /jobs/<pk>/cancel/": {
        "": Recipe(_form("/jobs/{p.pk}/cancel/"), ("job.cancel",), "bob", prepare=_idle_job, team="acme")
    },
    # --- console: sign-in, tokens, teams, members ---------------------------------
    "POST /login/": {
        "": Recipe(
            _form("/login/", {"username": "bob", "password": "demo-password"}),
            ("auth.login",),
            "bob",
            login=False,
        )
    },
    "PUT /login/": {
        "": Recipe(  # Django's LoginView treats PUT as POST; with no form data it fails
            _form("/login/", method="put"),
            ("auth.login_failed",),
            None,
            login=False,
            status=(200,),
            outcome="failure",
            identity=("anonymous", "anonymous"),
            targeted=False,
        )
    },
    "POST /logout/": {"": Recipe(_form("/logout/"), ("auth.logout",), "bob")},
    "POST /account/tokens/": {
        "create": Recipe(
            _form("/account/tokens/", {"name": "ci", "scopes": ["read"], "days": "30"}), ("api_token.create",), "bob"
        ),
        "revoke": Recipe(
            _form("/account/tokens/", lambda w, t: {"revoke": t.pk}),
            ("api_token.revoke",),
            "bob",
            prepare=_token,
        ),
    },
    "POST /api/v1/auth/token/": {
        "": Recipe(  # signs in and creates a token: two changes
            _json(
                "post",
                "/api/v1/auth/token/",
                {"username": "bob", "password": "demo-password", "name": "cli"},
            ),
            ("auth.login", "api_token.create"),
            "bob",
            login=False,
        )
    },
    "POST /login/verify/": {"": Recipe(_second_step, ("auth.login",), "bob", prepare=_enrolled, login=False)},
    "POST /login/enrol/": {"": Recipe(_enrol_at_sign_in, ("auth.2fa_enrol", "auth.login"), "bob", login=False)},
    "POST /account/": {
        "password": Recipe(
            _form("/account/", {"password": "1", "old_password": "demo-password",
                                "new_password1": "a-Long-pass-phrase-9", "new_password2": "a-Long-pass-phrase-9"}),
            ("auth.password_change",),
            "bob",
        )
    },
    "POST /account/two-factor/enrol/": {"": Recipe(_enrol_from_account, ("auth.2fa_enrol",), "bob")},
    "POST /account/two-factor/": {
        "codes": Recipe(
            _form("/account/two-factor/", lambda w, device: {"action": "codes", "code": _totp(device, 1)}),
            ("auth.2fa_recovery_codes",),
            "bob",
            prepare=_enrolled,
        )
    },
    "POST /account/sessions/end/": {"": Recipe(_form("/account/sessions/end/"), ("auth.sessions_ended",), "bob")},
    "POST /users/<user_id>/reset-two-factor/": {
        "": Recipe(
            _form("/users/{p.user_id}/reset-two-factor/"), ("auth.2fa_reset",), "ops", prepare=_enrolled,
        )
    },
    "POST /team/": {
        "invite": Recipe(
            _form("/team/", lambda w, p: {"action": "invite", "team": w.acme.pk, "email": "dana@example.com", "role": "member"}),
            ("member.invite",),
            "alice",
            team="acme",
        ),
        "role": Recipe(
            _form("/team/", lambda w, m: {"action": "role", "membership": m.pk, "role": "auditor"}),
            ("member.change_role",),
            "alice",
            prepare=_membership,
            team="acme",
        ),
        "remove": Recipe(
            _form("/team/", lambda w, m: {"action": "remove", "membership": m.pk}),
            ("member.remove",),
            "alice",
            prepare=_membership,
            team="acme",
        ),
        "cancel": Recipe(
            _form("/team/", lambda w, inv: {"action": "cancel", "invitation": inv[0].pk}),
            ("member.cancel_invite",),
            "alice",
            prepare=_invitation,
            team="acme",
        ),
    },
    "POST /invite/<key>/": {
        "join": Recipe(
            lambda client, w, inv: client.post(f"/invite/{inv[1]}/"),
            ("member.accept_invite", "member.add"),
            "charlie",
            prepare=_invitation_for_charlie,
            team="acme",
        ),
        "sign-up": Recipe(
            lambda client, w, inv: client.post(
                f"/invite/{inv[1]}/", {"username": "dana", "password1": "a-Long-pass-phrase-9", "password2": "a-Long-pass-phrase-9"}
            ),
            ("auth.sign_up", "member.accept_invite", "member.add", "auth.login"),
            None,
            prepare=_invitation,
            login=False,
            identity=("user", "dana"),
        ),
    },
    "POST /api/v1/auth/tokens/": {
        "": Recipe(_json("post", "/api/v1/auth/tokens/", {"name": "ci", "scopes": ["read"]}), ("api_token.create",), "bob")
    },
    "POST /api/v1/auth/tokens/<pk>/revoke/": {
        "": Recipe(
            _json("post", "/api/v1/auth/tokens/{p.pk}/revoke/"),
            ("api_token.revoke",),
            "bob",
            prepare=_token,
        )
    },
    "POST /api/v1/teams/": {
        "": Recipe(_json("post", "/api/v1/teams/", {"name": "Initech"}), ("team.create",), "ops")
    },
    "POST /api/v1/members/": {
        "": Recipe(
            _json(
                "post",
                "/api/v1/members/",
                lambda w, _: {"team": w.acme.pk, "username": "charlie", "role": "member"},
            ),
            ("member.add",),
            "alice",
            team="acme",
        )
    },
    "PATCH /api/v1/members/<pk>/": {
        "": Recipe(
            _json("patch", "/api/v1/members/{p.pk}/", {"role": "admin"}),
            ("member.change_role",),
            "alice",
            prepare=_membership,
            team="acme",
        )
    },
    "DELETE /api/v1/members/<pk>/": {
        "": Recipe(
            _json("delete", "/api/v1/members/{p.pk}/"),
            ("member.remove",),
            "alice",
            prepare=_membership,
            team="acme",
        )
    },
    # --- instances: fleet and lifecycle -----------------------------------------------
    "POST /api/v1/hosts/": {
        "": Recipe(
            _json(
                "post",
                "/api/v1/hosts/",
                {"name": "h100-c", "region": "us-east-1", "kind": "passthrough"},
            ),
            ("host.register",),
            "ops",
        )
    },
    "PATCH /api/v1/hosts/<pk>/": {
        "": Recipe(
            _json("patch", "/api/v1/hosts/{p.pk}/", {"state": "draining"}),
            ("host.update",),
            "ops",
            prepare=_host,
        )
    },
    "POST /api/v1/hosts/<pk>/cordon/": {
        "": Recipe(_json("post", "/api/v1/hosts/{p.pk}/cordon/", {"reason": "rack work"}), ("host.cordon",), "ops",
                   prepare=_host)
    },
    "POST /api/v1/hosts/<pk>/uncordon/": {
        "": Recipe(_json("post", "/api/v1/hosts/{p.pk}/uncordon/"), ("host.uncordon",), "ops", prepare=_cordoned_host)
    },
    "POST /api/v1/hosts/<pk>/drain/": {
        "": Recipe(_json("post", "/api/v1/hosts/{p.pk}/drain/"), ("host.cordon", "host.drain"), "ops", prepare=_host)
    },
    "POST /api/v1/gpus/<uuid>/cordon/": {
        "": Recipe(_json("post", "/api/v1/gpus/GPU-h100-a-0/cordon/", {"reason": "XID 48"}), ("gpu.cordon",), "ops")
    },
    "POST /api/v1/gpus/<uuid>/uncordon/": {
        "": Recipe(_json("post", "/api/v1/gpus/{p.uuid}/uncordon/"), ("gpu.uncordon",), "ops", prepare=_cordoned_gpu)
    },
    "POST /hosts/<pk>/diagnostics/collect/": {
        "": Recipe(_form("/hosts/{p.pk}/diagnostics/collect/"), ("host.diagnostics.collect",), "ops", prepare=_host)
    },
    "POST /hosts/<pk>/placement/<verb>/": {
        "cordon": Recipe(_form("/hosts/{p.pk}/placement/cordon/", {"reason": "fans"}), ("host.cordon",), "ops",
                         prepare=_host),
        "uncordon": Recipe(_form("/hosts/{p.pk}/placement/uncordon/"), ("host.uncordon",), "ops",
                           prepare=_cordoned_host),
        "drain": Recipe(_form("/hosts/{p.pk}/placement/drain/"), ("host.cordon", "host.drain"), "ops", prepare=_host),
    },
    "POST /gpus/<uuid>/placement/<verb>/": {
        "cordon": Recipe(_form("/gpus/GPU-h100-a-0/placement/cordon/", {"reason": "XID 48"}), ("gpu.cordon",), "ops"),
        "uncordon": Recipe(_form("/gpus/{p.uuid}/placement/uncordon/"), ("gpu.uncordon",), "ops",
                           prepare=_cordoned_gpu),
    },
    "POST /api/v1/hosts/<pk>/diagnostics/": {
        "": Recipe(_json("post", "/api/v1/hosts/{p.pk}/diagnostics/"), ("host.diagnostics.collect",), "ops",
                   prepare=_host, status=(202,))
    },
    "POST /api/v1/instances/": {
        "": Recipe(
            _json(
                "post",
                "/api/v1/instances/",
                lambda w, _: {
                    "team": w.acme.pk,
                    "name": "api-job",
                    "gpu_model": "H100-80GB",
                    "gpu_count": 1,
                    "pricing_model": "on_demand",
                },
            ),
            ("network.interface.attach", "instance.launch"),  # the address, given as the instance is made
            "bob",
            prepare=_acme_network,
            team="acme",
        )
    },
    "POST /api/v1/instances/<pk>/start/": {
        "": Recipe(
            _json("post", "/api/v1/instances/{p.pk}/start/"),
            ("instance.start",),
            "bob",
            prepare=_stopped,
            team="acme",
        )
    },
    "POST /api/v1/instances/<pk>/stop/": {
        "": Recipe(
            _json("post", "/api/v1/instances/{p.pk}/stop/"),
            ("instance.stop",),
            "bob",
            prepare=_running,
            team="acme",
        )
    },
    "POST /api/v1/instances/<pk>/terminate/": {
        "": Recipe(
            _json("post", "/api/v1/instances/{p.pk}/terminate/"),
            ("instance.terminate",),
            "bob",
            prepare=_running,
            team="acme",
        )
    },
    "POST /api/v1/instances/<pk>/force-stop/": {
        "": Recipe(
            _json("post", "/api/v1/instances/{p.pk}/force-stop/"),
            ("instance.force_stop",),
            "ops",
            prepare=_stopping,
            team="acme",
        )
    },
    "POST /instances/new/": {
        "": Recipe(
            _form(
                "/instances/new/",
                lambda w, _: {
                    "team": w.acme.pk,
                    "name": "page-job",
                    "gpu_model": "H100-80GB",
                    "gpu_count": 1,
                    "pricing_model": "on_demand",
                },
            ),
            ("network.interface.attach", "instance.launch"),  # the address, given as the instance is made
            "bob",
            prepare=_acme_network,
            team="acme",
        )
    },
    "POST /instances/<pk>/<verb>/": {
        "stop": Recipe(
            _form("/instances/{p.pk}/stop/"),
            ("instance.stop",),
            "bob",
            prepare=_running,
            team="acme",
        ),
        "start": Recipe(
            _form("/instances/{p.pk}/start/"),
            ("instance.start",),
            "bob",
            prepare=_stopped,
            team="acme",
        ),
        "terminate": Recipe(
            _form("/instances/{p.pk}/terminate/"),
            ("instance.terminate",),
            "bob",
            prepare=_running,
            team="acme",
        ),
    },
    "POST /monitoring/instances/<pk>/precision/": {
        "": Recipe(
            _form("/monitoring/instances/{p.pk}/precision/", {"precision": "fp16"}),
            ("instance.precision",),
            "bob",
            prepare=_running,
            team="acme",
        ),
    },
    # --- monitoring: agent tokens and alerts -------------------------------------------
    "POST /api/v1/host-tokens/": {
        "": Recipe(
            _json("post", "/api/v1/host-tokens/", {"host": "h100-a", "name": "agent"}),
            ("host_token.create",),
            "ops",
        )
    },
    "POST /api/v1/host-tokens/<pk>/revoke/": {
        "": Recipe(
            _json("post", "/api/v1/host-tokens/{p.pk}/revoke/"),
            ("host_token.revoke",),
            "ops",
            prepare=_host_token,
        )
    },
    "POST /api/v1/host-tokens/<pk>/rotate/": {
        "": Recipe(
            _json("post", "/api/v1/host-tokens/{p.pk}/rotate/"),
            ("host_token.create", "host_token.rotate"),
            "ops",
            prepare=_host_token,
        )
    },
    "POST /hosts/<pk>/tokens/": {
        "rotate": Recipe(
            _form("/hosts/{p.host_id}/tokens/", lambda w, t: {"rotate": t.pk}),
            ("host_token.create", "host_token.rotate"),
            "ops",
            prepare=_host_token,
        ),
        "create": Recipe(
            _form("/hosts/{p.pk}/tokens/", {"name": "rack 4"}),
            ("host_token.create",),
            "ops",
            prepare=_host,
        ),
        "revoke": Recipe(
            _form("/hosts/{p.host_id}/tokens/", lambda w, t: {"revoke": t.pk}),
            ("host_token.revoke",),
            "ops",
            prepare=_host_token,
        ),
    },
    "POST /api/v1/alerts/<pk>/acknowledge/": {
        "": Recipe(
            _json("post", "/api/v1/alerts/{p.pk}/acknowledge/"),
            ("alert.acknowledge",),
            "bob",
            prepare=_alert,
            team="acme",
        )
    },
    "POST /alerts/<pk>/acknowledge/": {
        "": Recipe(
            _form("/alerts/{p.pk}/acknowledge/"),
            ("alert.acknowledge",),
            "bob",
            prepare=_alert,
            team="acme",
        )
    },
    "POST /api/v1/alerts/<pk>/resolve/": {
        "": Recipe(_json("post", "/api/v1/alerts/{p.pk}/resolve/"), ("alert.resolve",), "bob",
                   prepare=_alert, team="acme")
    },
    "POST /api/v1/alerts/<pk>/silence/": {
        "": Recipe(_json("post", "/api/v1/alerts/{p.pk}/silence/", _until), ("alert.silence",), "bob",
                   prepare=_alert, team="acme")
    },
    "POST /alerts/<pk>/resolve/": {
        "": Recipe(_form("/alerts/{p.pk}/resolve/"), ("alert.resolve",), "bob", prepare=_alert, team="acme")
    },
    "POST /alerts/<pk>/silence/": {
        "": Recipe(_form("/alerts/{p.pk}/silence/", {"hours": "2"}), ("alert.silence",), "bob", prepare=_alert,
                   team="acme")
    },
    "POST /api/v1/alert-rules/": {
        "": Recipe(
            _json("post", "/api/v1/alert-rules/", lambda w, _: {
                "team": w.acme.pk, "name": "busy", "metric": "gpu_util", "threshold": 90, "hold_s": 5}),
            ("alert_rule.create",), "alice", team="acme",
        )
    },
    "PATCH /api/v1/alert-rules/<pk>/": {
        "": Recipe(_json("patch", "/api/v1/alert-rules/{p.pk}/", {"threshold": 95}), ("alert_rule.update",),
                   "alice", prepare=_rule, team="acme")
    },
    "DELETE /api/v1/alert-rules/<pk>/": {
        "": Recipe(_json("delete", "/api/v1/alert-rules/{p.pk}/"), ("alert_rule.delete",), "alice",
                   prepare=_rule, team="acme")
    },
    "POST /api/v1/alert-rules/<pk>/silence/": {
        "": Recipe(_json("post", "/api/v1/alert-rules/{p.pk}/silence/", _until), ("alert.silence",), "alice",
                   prepare=_rule, team="acme")
    },
    "POST /api/v1/alert-silences/<pk>/end/": {
        "": Recipe(_json("post", "/api/v1/alert-silences/{p.pk}/end/"), ("alert.unsilence",), "alice",
                   prepare=_silence, team="acme")
    },
    "POST /api/v1/notification-channels/": {
        "": Recipe(
            _json("post", "/api/v1/notification-channels/", lambda w, _: {
                "team": w.acme.pk, "name": "mail", "kind": "email", "target": "oncall@acme.test"}),
            ("notification_channel.create",), "alice", team="acme",
        )
    },
    "PATCH /api/v1/notification-channels/<pk>/": {
        "": Recipe(_json("patch", "/api/v1/notification-channels/{p.pk}/", {"enabled": False}),
                   ("notification_channel.update",), "alice", prepare=_channel, team="acme")
    },
    "DELETE /api/v1/notification-channels/<pk>/": {
        "": Recipe(_json("delete", "/api/v1/notification-channels/{p.pk}/"), ("notification_channel.delete",),
                   "alice", prepare=_channel, team="acme")
    },
    "POST /api/v1/notification-channels/<pk>/test/": {
        "": Recipe(_json("post", "/api/v1/notification-channels/{p.pk}/test/"), ("notification_channel.test",),
                   "alice", prepare=_channel, team="acme")
    },
    "POST /alerts/rules/": {
        "": Recipe(
            _form("/alerts/rules/", lambda w, _: {
                "owner": str(w.acme.pk), "name": "busy", "metric": "gpu_util", "comparison": ">=",
                "threshold": "90", "hold_s": "5", "severity": "warning"}),
            ("alert_rule.create",), "alice", team="acme",
        )
    },
    "POST /alerts/rules/<pk>/": {
        "toggle": Recipe(_form("/alerts/rules/{p.pk}/", {"action": "toggle"}), ("alert_rule.update",), "alice",
                         prepare=_rule, team="acme"),
        "silence": Recipe(_form("/alerts/rules/{p.pk}/", {"action": "silence", "hours": "1"}), ("alert.silence",),
                          "alice", prepare=_rule, team="acme"),
        "delete": Recipe(_form("/alerts/rules/{p.pk}/", {"action": "delete"}), ("alert_rule.delete",), "alice",
                         prepare=_rule, team="acme"),
    },
    "POST /alerts/channels/": {
        "": Recipe(
            _form("/alerts/channels/", lambda w, _: {
                "owner": str(w.acme.pk), "name": "mail", "kind": "email", "target": "oncall@acme.test",
                "min_severity": "info"}),
            ("notification_channel.create",), "alice", team="acme",
        )
    },
    "POST /alerts/channels/<pk>/": {
        "test": Recipe(_form("/alerts/channels/{p.pk}/", {"action": "test"}), ("notification_channel.test",),
                       "alice", prepare=_channel, team="acme"),
        "toggle": Recipe(_form("/alerts/channels/{p.pk}/", {"action": "toggle"}), ("notification_channel.update",),
                         "alice", prepare=_channel, team="acme"),
        "delete": Recipe(_form("/alerts/channels/{p.pk}/", {"action": "delete"}), ("notification_channel.delete",),
                         "alice", prepare=_channel, team="acme"),
    },
    # --- billing: catalog, reservations, budgets, invoices, preemption -----------------
    "POST /api/v1/prices/": {
        "": Recipe(
            _json(
                "post",
                "/api/v1/prices/",
                lambda w, _: {
                    "sku": "H100-80GB",
                    "kind": "on_demand",
                    "hourly": "2.500000",
                    "effective_from": (timezone.now() + timedelta(days=1)).isoformat(),
                },
            ),
            ("billing.price.set",),
            "ops",
        )
    },
    "POST /api/v1/spot-prices/": {
        "": Recipe(
            _json("post", "/api/v1/spot-prices/", {"sku": "H100-80GB", "hourly": "0.700000"}),
            ("billing.spot_price.set",),
            "ops",
        )
    },
    "POST /api/v1/reservations/": {
        "": Recipe(
            _json(
                "post",
                "/api/v1/reservations/",
                lambda w, _: {
                    "team": w.acme.pk,
                    "gpu_model": "H100-80GB",
                    "gpu_count": 1,
                    "term": "1y",
                    "start": (timezone.now() + timedelta(hours=2)).isoformat(),
                },
            ),
            ("billing.reservation.create",),
            "alice",
            prepare=_priced,
            team="acme",
        )
    },
    "POST /api/v1/budgets/": {
        "": Recipe(
            _json(
                "post",
                "/api/v1/budgets/",
                lambda w, _: {
                    "team": w.acme.pk,
                    "month": f"{_this_month():%Y-%m}",
                    "amount": "1000.00",
                },
            ),
            ("billing.budget.create",),
            "alice",
            team="acme",
        )
    },
    "PATCH /api/v1/budgets/<pk>/": {
        "": Recipe(
            _json("patch", "/api/v1/budgets/{p.pk}/", {"amount": "2000.00"}),
            ("billing.budget.update",),
            "alice",
            prepare=_budget,
            team="acme",
        )
    },
    "DELETE /api/v1/budgets/<pk>/": {
        "": Recipe(
            _json("delete", "/api/v1/budgets/{p.pk}/"),
            ("billing.budget.delete",),
            "alice",
            prepare=_budget,
            team="acme",
        )
    },
    "PATCH /api/v1/invoices/<pk>/": {
        "": Recipe(
            _json("patch", "/api/v1/invoices/{p.pk}/", {"memo": "PO-7"}),
            ("billing.invoice.update",),
            "alice",
            prepare=_invoice,
            team="acme",
        )
    },
    "DELETE /api/v1/invoices/<pk>/": {
        "": Recipe(  # invoices are never deleted: refused, and the attempt audited
            _json("delete", "/api/v1/invoices/{p.pk}/"),
            ("billing.invoice.edit",),
            "alice",
            prepare=_issued_invoice,
            team="acme",
            status=(409,),
            outcome="denied",
        )
    },
    "POST /api/v1/invoices/<pk>/adjustments/": {
        "": Recipe(
            _json(
                "post",
                "/api/v1/invoices/{p.pk}/adjustments/",
                {"amount": "-10.00", "reason": "goodwill"},
            ),
            ("billing.adjustment.create",),
            "ops",
            prepare=_invoice,
            team="acme",
        )
    },
    "POST /api/v1/invoices/<pk>/issue/": {
        "": Recipe(
            _json("post", "/api/v1/invoices/{p.pk}/issue/"),
            ("billing.invoice.issue",),
            "ops",
            prepare=lambda w: _invoice(w, months_ago=1),
            team="acme",
        )
    },
    "POST /api/v1/preemption-notices/": {
        "": Recipe(
            _json(
                "post",
                "/api/v1/preemption-notices/",
                lambda w, i: {"instance": i.pk, "notice_seconds": 120},
            ),
            ("billing.preemption.notice",),
            "ops",
            prepare=_spot,
            team="acme",
        )
    },
    "POST /budgets/": {
        "": Recipe(
            _form(
                "/budgets/",
                lambda w, _: {
                    "team": w.acme.pk,
                    "month": f"{_this_month():%Y-%m}",
                    "amount": "1000.00",
                    "actual_thresholds": "50, 80, 100",
                    "forecast_thresholds": "100",
                },
            ),
            ("billing.budget.create",),
            "alice",
            team="acme",
        )
    },
    "POST /budgets/<pk>/delete/": {
        "": Recipe(
            _form("/budgets/{p.pk}/delete/"),
            ("billing.budget.delete",),
            "alice",
            prepare=_budget,
            team="acme",
        )
    },
    "POST /invoices/<pk>/memo/": {
        "": Recipe(
            _form("/invoices/{p.pk}/memo/", {"memo": "PO-7"}),
            ("billing.invoice.update",),
            "alice",
            prepare=_invoice,
            team="acme",
        )
    },
    "POST /reservations/": {
        "": Recipe(
            _form(
                "/reservations/",
                lambda w, _: {
                    "team": w.acme.pk,
                    "gpu_model": "H100-80GB",
                    "gpu_count": 1,
                    "term": "1y",
                    "start": _later(),
                },
            ),
            ("billing.reservation.create",),
            "alice",
            prepare=_priced,
            team="acme",
        )
    },
    "POST /prices/": {
        "price": Recipe(
            _form(
                "/prices/",
                lambda w, _: {
                    "set_price": "1",
                    "sku": "H100-80GB",
                    "kind": "on_demand",
                    "hourly": "2.5",
                    "effective_from": _later(24),
                },
            ),
            ("billing.price.set",),
            "ops",
        ),
        "spot": Recipe(
            _form("/prices/", {"set_spot": "1", "sku": "H100-80GB", "hourly": "0.7"}),
            ("billing.spot_price.set",),
            "ops",
        ),
    },
    "POST /prices/preempt/<pk>/": {
        "": Recipe(
            _form("/prices/preempt/{p.pk}/"),
            ("billing.preemption.notice",),
            "ops",
            prepare=_spot,
            team="acme",
        )
    },
    # --- audit ----------------------------------------------------------------------
    "POST /audit/verify/": {"": Recipe(_form("/audit/verify/"), ("audit.verify",), "audrey")},
    # --- network --------------------------------------------------------------------
    "POST /api/v1/vpcs/": {"": Recipe(
        _json("post", "/api/v1/vpcs/", lambda w, _: {"team": w.acme.pk, "name": "lab", "cidr": "10.78.0.0/16"}),
        ("network.vpc.create",), "bob", team="acme")},
    "DELETE /api/v1/vpcs/<pk>/": {"": Recipe(_json("delete", "/api/v1/vpcs/{p.pk}/"), ("network.vpc.delete",), "bob",
                                             prepare=_vpc, team="acme")},
    "POST /api/v1/subnets/": {"": Recipe(
        _json("post", "/api/v1/subnets/", lambda w, p: {"vpc": p.pk, "name": "b", "cidr": "10.77.2.0/24"}),
        ("network.subnet.create",), "bob", prepare=_vpc, team="acme")},
    "DELETE /api/v1/subnets/<pk>/": {"": Recipe(_json("delete", "/api/v1/subnets/{p.pk}/"),
                                                ("network.subnet.delete",), "bob", prepare=_subnet, team="acme")},
    "POST /api/v1/security-groups/": {"": Recipe(
        _json("post", "/api/v1/security-groups/", lambda w, _: {"team": w.acme.pk, "name": "web"}),
        ("network.group.create",), "bob", team="acme")},
    "PATCH /api/v1/security-groups/<pk>/": {"": Recipe(
        _json("patch", "/api/v1/security-groups/{p.pk}/", {"description": "changed"}),
        ("network.group.update",), "bob", prepare=_security_group, team="acme")},
    "DELETE /api/v1/security-groups/<pk>/": {"": Recipe(
        _json("delete", "/api/v1/security-groups/{p.pk}/"), ("network.group.delete",), "bob",
        prepare=_security_group, team="acme")},
    "POST /api/v1/security-groups/<pk>/rules/": {"": Recipe(
        _json("post", "/api/v1/security-groups/{p.pk}/rules/",
              {"direction": "inbound", "protocol": "tcp", "port_from": 443, "cidr": "10.0.0.0/8"}),
        ("network.rule.add",), "bob", prepare=_security_group, team="acme")},
    "DELETE /api/v1/security-groups/<pk>/rules/<rule_id>/": {"": Recipe(
        _json("delete", "/api/v1/security-groups/{p.group_id}/rules/{p.pk}/"), ("network.rule.remove",), "bob",
        prepare=_security_rule, team="acme")},
    "PATCH /api/v1/network-interfaces/<pk>/": {"": Recipe(
        _json("patch", "/api/v1/network-interfaces/{p.pk}/", lambda w, p: {"security_groups": [p.group]}),
        ("network.interface.groups",), "bob", prepare=_interface, team="acme")},
    "POST /networks/": {"": Recipe(
        _form("/networks/", lambda w, _: {"team": w.acme.pk, "name": "lab", "cidr": "10.78.0.0/16"}),
        ("network.vpc.create",), "bob", team="acme")},
    "POST /networks/<pk>/": {"": Recipe(_form("/networks/{p.pk}/", {"name": "b", "cidr": "10.77.2.0/24"}),
                                        ("network.subnet.create",), "bob", prepare=_vpc, team="acme")},
    "POST /security-groups/": {"": Recipe(
        _form("/security-groups/", lambda w, _: {"team": w.acme.pk, "name": "web"}),
        ("network.group.create",), "bob", team="acme")},
    "POST /security-groups/<pk>/": {"": Recipe(
        _form("/security-groups/{p.pk}/", {"direction": "inbound", "protocol": "tcp", "port_from": "443",
                                           "cidr": "10.0.0.0/8"}),
        ("network.rule.add",), "bob", prepare=_security_group, team="acme")},
    "POST /security-groups/<pk>/rules/<rule_id>/remove/": {"": Recipe(
        _form("/security-groups/{p.group_id}/rules/{p.pk}/remove/"), ("network.rule.remove",), "bob",
        prepare=_security_rule, team="acme")},
    "POST /network-interfaces/<pk>/groups/": {"": Recipe(
        _form("/network-interfaces/{p.pk}/groups/", lambda w, p: {"security_groups": [p.group]}),
        ("network.interface.groups",), "bob", prepare=_interface, team="acme")},
    "POST /api/v1/recommendations/<pk>/dismiss/": {"": Recipe(
        _json("post", "/api/v1/recommendations/{p.pk}/dismiss/", {"kind": "stop", "days": 7}),
        ("savings.recommendation.snooze",), "alice", prepare=_running, team="acme")},
    "POST /api/v1/recommendations/<pk>/restore/": {"": Recipe(
        _json("post", "/api/v1/recommendations/{p.pk}/restore/", {"kind": "stop"}),
        ("savings.recommendation.restore",), "alice", prepare=_dismissed_advice, team="acme")},
    "POST /api/v1/idle-stop-policies/": {"": Recipe(
        _json("post", "/api/v1/idle-stop-policies/", lambda w, _: {"team": w.acme.pk, "idle_minutes": 60}),
        ("savings.idle_stop.set",), "alice", team="acme")},
    "PATCH /api/v1/idle-stop-policies/<pk>/": {"": Recipe(
        _json("patch", "/api/v1/idle-stop-policies/{p.pk}/", {"enabled": False}), ("savings.idle_stop.off",),
        "alice", prepare=_idle_policy, team="acme")},
    "DELETE /api/v1/idle-stop-policies/<pk>/": {"": Recipe(
        _json("delete", "/api/v1/idle-stop-policies/{p.pk}/"), ("savings.idle_stop.delete",), "alice",
        prepare=_idle_policy, team="acme")},
    "POST /api/v1/region-footprints/": {"": Recipe(
        _json("post", "/api/v1/region-footprints/", lambda w, _: {"region": w.fleet["region"].pk, "pue": "1.2",
                                                                   "grid_g_co2e_per_kwh": "350"}),
        ("savings.footprint.set",), "ops")},
    "POST /savings/idle-stop/": {"": Recipe(
        _form("/savings/idle-stop/", lambda w, _: {"team": w.acme.pk, "enabled": "on", "idle_minutes": "60",
                                                   "warn_minutes": "10"}),
        ("savings.idle_stop.set",), "alice", team="acme")},
    "POST /savings/idle-stop/<pk>/": {"": Recipe(
        _form("/savings/idle-stop/{p.pk}/", {"enabled": "on", "idle_minutes": "30", "warn_minutes": "5"}),
        ("savings.idle_stop.set",), "alice", prepare=_running, team="acme")},
    "POST /savings/<pk>/dismiss/": {"": Recipe(
        _form("/savings/{p.pk}/dismiss/", {"kind": "stop"}), ("savings.recommendation.dismiss",), "alice",
        prepare=_running, team="acme")},
}
