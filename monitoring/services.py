"""Telemetry verbs that change state: host tokens, agent sessions and their GPUs.
Each is audited in its own transaction."""

from __future__ import annotations

from datetime import timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.models import Outcome
from audit.recording import record_event
from audit.refusals import record_refusal
from console.validators import plain_name
from instances import inventory as instance_inventory
from instances.models import Host, HostKind, Region

from .models import HostToken


class TokenError(ValueError):
    """A host token request that cannot be honoured (answers 400)."""


# --- host tokens --------------------------------------------------------------------


@transaction.atomic
def create_host_token(*, actor, host: Host, name: str = "") -> tuple[HostToken, str]:
    """The token row and the raw token, which is never stored and shown once. ``name`` is
    an optional label: a plain name of at most 80 characters (the page and the command
    both come here)."""
    limit = HostToken._meta.get_field("name").max_length
    if len(name) > limit:
        raise ValidationError({"name": f"A token's name is at most {limit} characters."})
    if name:
        try:
            plain_name(name)
        except ValidationError as exc:
            raise ValidationError({"name": exc.messages}) from None
    raw = HostToken.generate()
    token = HostToken.objects.create(
        host=host,
        name=name,
        key_hash=HostToken.hash(raw),
        prefix=raw[:10],
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    record_event(
        actor=actor, action="host_token.create", target=token,
        details={"host": host.name, "name": name, "prefix": token.prefix},
    )
    return token, raw


def token_group(token_id: int) -> str:
    """The agent connections authenticated by one host token (at most a few)."""
    return f"host_token.{token_id}"


def _tell_agents(token: HostToken) -> None:
    """After the commit, tell the agents connected with ``token`` what it now allows:
    a revoked token closes them (4401) at once, a shortened one when it expires."""
    message = {"type": "agent.token", "revoked": token.revoked_at is not None,
               "expires_at": token.expires_at.timestamp()}

    def send() -> None:
        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(token_group(token.pk), message)

    transaction.on_commit(send)


@transaction.atomic
def revoke_host_token(*, actor, token: HostToken) -> HostToken:
    token = HostToken.objects.select_for_update().select_related("host").get(pk=token.pk)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        record_event(
            actor=actor, action="host_token.revoke", target=token,
            details={"host": token.host.name, "name": token.name, "prefix": token.prefix},
        )
        _tell_agents(token)
    return token


@transaction.atomic
def rotate_host_token(*, actor, token: HostToken, grace_s: int | None = None) -> tuple[HostToken, str]:
    """A new token for the same host; the old one keeps working for ``grace_s`` seconds
    (``HOST_TOKEN_ROTATION_GRACE_S``) so the agent can be handed the new one without a
    gap in telemetry. Returns the new token and its raw value (shown once)."""
    token = HostToken.objects.select_for_update().select_related("host").get(pk=token.pk)
    now = timezone.now()
    if token.revoked_at is not None or token.expires_at <= now:
        raise TokenError("This token is revoked or expired; create a new one instead.")
    if token.replaced_by_id is not None:
        raise TokenError("This token was already rotated; rotate its replacement instead.")
    grace = timedelta(seconds=settings.HOST_TOKEN_ROTATION_GRACE_S if grace_s is None else grace_s)
    new, raw = create_host_token(actor=actor, host=token.host, name=token.name)
    token.expires_at = min(token.expires_at, now + grace)
    token.replaced_by = new
    token.save(update_fields=["expires_at", "replaced_by"])
    record_event(
        actor=actor, action="host_token.rotate", target=token,
        details={
            "host": token.host.name, "old": token.prefix, "new": new.prefix,
            "old_valid_until": token.expires_at.isoformat(),
        },
    )
    _tell_agents(token)
    return new, raw


@transaction.atomic
def ensure_host(*, actor, name: str, region: str | None = None, kind: str = HostKind.PASSTHROUGH) -> tuple[Host, bool]:
    """The host called ``name``, registered in ``region`` first if it is new."""
    host = Host.objects.filter(name=name).first()
    if host is not None:
        return host, False
    regions = Region.objects.all()
    if region:
        found = regions.filter(name=region).first()
        if found is None:
            known = ", ".join(regions.values_list("name", flat=True)) or "none yet"
            raise TokenError(f"Unknown region {region!r} (known: {known}).")
    else:
        found = regions.first()
        if found is None:
            raise TokenError("No region exists yet; pass a region to create the first one.")
    return instance_inventory.register_host(actor=actor, name=name, region=found, kind=kind), True


def authenticate_agent(raw: str) -> HostToken | None:
    """The live token for ``raw`` (with its host), or None."""
    if not raw or len(raw) > 200:
        return None
    token = HostToken.objects.live().select_related("host").filter(key_hash=HostToken.hash(raw)).first()
    if token is not None:
        now = timezone.now()
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            HostToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def record_agent_reject(*, host: Host | None, reason: str, details: dict | None = None) -> None:
    if host is None:  # no valid token: counted per source address and minute, not a row each
        record_refusal(action="agent.reject", details={"reason": reason[:300], **(details or {})})
        return
    record_event(
        actor=host if host is not None else "agent",
        action="agent.reject",
        target=host,
        outcome=Outcome.DENIED,
        details={"reason": reason[:300], **(details or {})},
    )


# --- what a host's devices are held for (the simulated agent follows it) -------------


def host_allocations(host: Host) -> dict:
    """{"host", "devices": {uuid: {"state", "instance"}}} for every GPU and slice of
    ``host`` an instance holds now. The demo's simulated agent polls it so a launch makes
    its GPUs busy; a real agent reads the hardware and never needs it."""
    from instances.models import Gpu, GpuSlice

    devices = {}
    for model, fields in ((Gpu, "uuid"), (GpuSlice, "uuid")):
        rows = model.objects.filter(instance__isnull=False, **{"host" if model is Gpu else "gpu__host": host})
        for uuid, state, name in rows.values_list(fields, "instance__state", "instance__name"):
            devices[uuid] = {"state": state, "instance": name}
    return {"host": host.name, "devices": devices}
