"""Instances' interfaces: the subnet and security groups a launch asks for (checked
before it is placed), the address it gets, and the groups changed later."""

from __future__ import annotations

import ipaddress
from contextlib import contextmanager
from contextvars import ContextVar

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event
from console.validators import whole_number
from instances.models import Instance

from .models import (
    Interface,
    SecurityGroup,
    Subnet,
)
from .rulesets import resync_on_commit
from .vpcs import ensure_defaults

MAX_GROUPS_PER_INTERFACE = 5


def _check_groups(groups, team, errors: dict) -> list[SecurityGroup]:
    ids = [getattr(g, "pk", g) for g in groups]
    if not ids or len(ids) > MAX_GROUPS_PER_INTERFACE:
        errors["security_groups"] = f"Name 1 to {MAX_GROUPS_PER_INTERFACE} security groups."
        return []
    if not all(isinstance(i, int) and whole_number(i) is not None for i in ids):
        errors["security_groups"] = "Security groups are named by their ids (numbers)."
        return []
    found = list(SecurityGroup.objects.filter(pk__in=ids, team=team))
    missing = sorted(set(ids) - {g.pk for g in found})
    if missing:
        errors["security_groups"] = (f"Security group {', '.join(map(str, missing))} is not one of team "
                                     f"{team.name}'s groups.")
    return found


def check_placement(*, team, subnet=None, groups=None) -> None:
    """Refuse a launch's network choice before anything is written."""
    errors: dict[str, str] = {}
    if subnet not in (None, ""):
        chosen = _team_subnet(subnet, team)
        if chosen is None:
            errors["subnet"] = f"Subnet {getattr(subnet, 'pk', subnet)} is not one of team {team.name}'s subnets."
        else:
            try:
                _free_address(chosen)
            except ValidationError as exc:
                errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
    if groups:
        _check_groups(groups, team, errors)
    if errors:
        raise ValidationError(errors)


def check_choice(*, team, subnet=None, groups=None) -> dict:
    """A job's or a scaling group's network, checked as a launch's is, as it is stored:
    ``{"subnet": id or None (the team's default), "security_groups": [ids] (empty: the
    team's default group)}``. Each of its launches is checked again (``on_network``): a
    subnet or group deleted since refuses the launch by name."""
    check_placement(team=team, subnet=subnet, groups=groups)
    return {"subnet": None if subnet in (None, "") else getattr(subnet, "pk", subnet),
            "security_groups": sorted({getattr(g, "pk", g) for g in groups or []})}


def launching_on(*, actor, team, choice: dict | None):
    """``on_network`` for a stored choice (``check_choice``'s)."""
    choice = choice or {}
    return on_network(actor=actor, team=team, subnet=choice.get("subnet"), groups=choice.get("security_groups") or None)


def describe_choice(choice: dict | None) -> dict:
    """A stored choice with names, as audit records and pages show it."""
    choice = choice or {}
    subnet = Subnet.objects.filter(pk=choice.get("subnet")).first() if choice.get("subnet") else None
    groups = choice.get("security_groups") or []
    names = sorted(SecurityGroup.objects.filter(pk__in=groups).values_list("name", flat=True)) if groups else []
    return {"subnet": subnet.name if subnet is not None else "default", "security_groups": names or ["default"]}


_requested: ContextVar[dict | None] = ContextVar("network_requested", default=None)


@contextmanager
def on_network(*, actor, team, subnet=None, groups=None):
    """Launches within get an interface in ``subnet`` with ``groups`` (the team's
    defaults where not named), written in the launch's own transaction. A bad choice is
    refused here, before anything is placed."""
    check_placement(team=team, subnet=subnet, groups=groups)
    token = _requested.set({"actor": actor, "subnet": subnet, "groups": groups})
    try:
        yield
    finally:
        _requested.reset(token)


def attach_requested(instance: Instance) -> Interface | None:
    """Called as a launch creates ``instance`` (network.signals)."""
    wanted = _requested.get()
    if wanted is None:
        return None
    return attach_instance(actor=wanted["actor"], instance=instance, subnet=wanted["subnet"], groups=wanted["groups"])


def _team_subnet(subnet, team) -> Subnet | None:
    pk = getattr(subnet, "pk", subnet)
    if isinstance(pk, bool) or not isinstance(pk, int):
        return None
    return Subnet.objects.select_related("vpc").filter(pk=pk, vpc__team=team).first()


def _free_address(subnet: Subnet) -> str:
    net = ipaddress.IPv4Network(subnet.cidr)
    used = set(Interface.objects.filter(subnet=subnet, released_at__isnull=True).values_list("address", flat=True))
    hosts = net.hosts()
    next(hosts, None)  # the first address is the subnet's gateway
    for candidate in hosts:
        if str(candidate) not in used:
            return str(candidate)
    raise ValidationError({"subnet": f"Subnet {subnet.name} ({subnet.cidr}) has no free address."})


@transaction.atomic
def attach_instance(*, actor, instance: Instance, subnet=None, groups=None) -> Interface:
    """Give a new instance its interface: an address in ``subnet`` (the team's default
    subnet where none is named) and ``groups`` (the default group where none)."""
    team = instance.team
    check_placement(team=team, subnet=subnet, groups=groups)
    _, default_subnet, default = ensure_defaults(actor=actor, team=team)
    chosen = _team_subnet(subnet, team) if subnet not in (None, "") else default_subnet
    Subnet.objects.select_for_update().get(pk=chosen.pk)  # addresses are handed out one at a time
    members = _check_groups(groups, team, {}) if groups else [default]
    interface = Interface.objects.create(instance=instance, team=team, subnet=chosen, address=_free_address(chosen))
    interface.groups.set(members)
    record_event(actor=actor, action="network.interface.attach", target=instance, team=team,
                 details={"address": interface.address, "subnet": chosen.name, "vpc": chosen.vpc.name,
                          "security_groups": sorted(g.name for g in members)})
    resync_on_commit(team.pk, hosts=[instance.host_id])
    return interface


@transaction.atomic
def set_groups(*, actor, interface: Interface, groups) -> Interface:
    """Change a (running) instance's groups; its host gets the new rules at once."""
    interface = Interface.objects.select_for_update().select_related("team", "instance").get(pk=interface.pk)
    if interface.released_at is not None:
        raise ValidationError({"security_groups": "The instance is terminated; its interface is gone."})
    errors: dict[str, str] = {}
    found = _check_groups(groups, interface.team, errors)
    if errors:
        raise ValidationError(errors)
    before = sorted(interface.groups.values_list("name", flat=True))
    interface.groups.set(found)
    record_event(actor=actor, action="network.interface.groups", target=interface.instance, team=interface.team_id,
                 details={"address": interface.address, "before": before, "after": sorted(g.name for g in found)})
    resync_on_commit(interface.team_id, hosts=[interface.instance.host_id, interface.placed_on_id])
    return interface


def release(*, actor, instance: Instance) -> None:
    """An ended instance's address is free again (runs in the transaction that ends it)."""
    interface = Interface.objects.filter(instance=instance, released_at__isnull=True).first()
    if interface is None:
        return
    interface.released_at = timezone.now()
    interface.save(update_fields=["released_at"])
    record_event(actor=actor, action="network.interface.release", target=instance, team=instance.team_id,
                 details={"address": interface.address})
