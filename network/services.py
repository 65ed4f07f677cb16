"""Network verbs: VPCs, subnets, security groups and their rules, instances' interfaces,
and each host's desired ruleset (versioned, sent to its agent, reported back).

Every verb checks its input first and names what is wrong (a ``ValidationError`` keyed
by field), then writes its rows and its audit record in one transaction. Addresses are
unique across the platform (there is no overlay network): a VPC's range may not overlap
any other VPC's, so an address names one instance on every host."""

from __future__ import annotations

import ipaddress
import logging
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from agent import protocol as wire
from audit.services import record_event
from instances.models import HOLDING_STATES, Host, Instance

from .models import (
    Direction,
    HostRules,
    Interface,
    Protocol,
    SecurityGroup,
    SecurityRule,
    Subnet,
    Vpc,
    ifname,
)

log = logging.getLogger(__name__)

PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
PREFIXES = (16, 28)  # a VPC or subnet is between a /16 and a /28
DEFAULT_VPC_PREFIX = 16
DEFAULT_SUBNET_PREFIX = 20
EVERYWHERE = "0.0.0.0/0"
MAX_RULES_PER_GROUP = 100
MAX_GROUPS_PER_INTERFACE = 5
APPLY_WITHIN = timedelta(seconds=30)  # a host that has not applied a change by then is alerted


# --- checks ------------------------------------------------------------------------------


def parse_cidr(value, *, field: str, errors: dict) -> ipaddress.IPv4Network | None:
    """An IPv4 network, or None with the reason under ``field``."""
    if not isinstance(value, str) or "/" not in value:
        errors[field] = f"{value!r} is not an IPv4 CIDR such as 10.20.0.0/16."
        return None
    try:
        return ipaddress.IPv4Network(value.strip())
    except ValueError as exc:
        if "host bits set" in str(exc):
            loose = ipaddress.IPv4Network(value.strip(), strict=False)
            errors[field] = f"{value} has host bits set; the network is {loose}."
        else:
            errors[field] = f"{value!r} is not an IPv4 CIDR such as 10.20.0.0/16."
        return None


def _range_rules(net: ipaddress.IPv4Network, field: str, errors: dict) -> None:
    low, high = PREFIXES
    if not low <= net.prefixlen <= high:
        errors[field] = f"{net} is a /{net.prefixlen}; a VPC or subnet is between a /{low} and a /{high}."
    elif not any(net.subnet_of(pool) for pool in PRIVATE):
        errors[field] = f"{net} is not a private range; use 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16."


def check_vpc(*, team, name: str, cidr, exclude: Vpc | None = None) -> ipaddress.IPv4Network:
    errors: dict[str, str] = {}
    net = parse_cidr(cidr, field="cidr", errors=errors)
    if net is not None:
        _range_rules(net, "cidr", errors)
    if net is not None and "cidr" not in errors:
        for other in Vpc.objects.exclude(pk=getattr(exclude, "pk", None)).only("team_id", "name", "cidr"):
            if net.overlaps(ipaddress.IPv4Network(other.cidr)):
                errors["cidr"] = (f"{net} overlaps VPC {other.name} ({other.cidr})." if other.team_id == team.pk else
                                  f"{net} overlaps a range another team uses; addresses are unique across the "
                                  "platform, so pick another range.")
                break
    if Vpc.objects.filter(team=team, name=name).exclude(pk=getattr(exclude, "pk", None)).exists():
        errors["name"] = f"Team {team.name} already has a VPC named {name}."
    if errors:
        raise ValidationError(errors)
    return net


def check_subnet(*, vpc: Vpc, name: str, cidr) -> ipaddress.IPv4Network:
    errors: dict[str, str] = {}
    net = parse_cidr(cidr, field="cidr", errors=errors)
    if net is not None:
        _range_rules(net, "cidr", errors)
    if net is not None and "cidr" not in errors:
        if not net.subnet_of(ipaddress.IPv4Network(vpc.cidr)):
            errors["cidr"] = f"{net} is not inside VPC {vpc.name} ({vpc.cidr})."
        else:
            for other in vpc.subnets.all():
                if net.overlaps(ipaddress.IPv4Network(other.cidr)):
                    errors["cidr"] = f"{net} overlaps subnet {other.name} ({other.cidr})."
                    break
    if vpc.subnets.filter(name=name).exists():
        errors["name"] = f"VPC {vpc.name} already has a subnet named {name}."
    if errors:
        raise ValidationError(errors)
    return net


@dataclass(frozen=True)
class RuleSpec:
    direction: str
    protocol: str
    port_from: int | None
    port_to: int | None
    cidr: str
    peer_group: SecurityGroup | None
    description: str


def _port(value, field: str, errors: dict) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        errors[field] = f"A port is a whole number from 0 to 65535; got {value!r}."
        return None
    port = int(value)
    if not 0 <= port <= 65535:
        errors[field] = f"A port is from 0 to 65535; got {port}."
        return None
    return port


def check_rule(values: dict, *, group: SecurityGroup) -> RuleSpec:
    """One rule's fields, each wrong one named: direction, protocol, ports (tcp/udp only,
    0-65535, from ≤ to), exactly one of ``cidr`` and ``peer_group`` (a group of the same
    team), and ``confirm_open`` for an inbound rule from 0.0.0.0/0."""
    errors: dict[str, str] = {}
    direction, proto = values.get("direction"), values.get("protocol")
    if direction not in Direction.values:
        errors["direction"] = f"The direction is inbound or outbound; got {direction!r}."
    if proto not in Protocol.values:
        errors["protocol"] = f"The protocol is one of tcp, udp, icmp or any; got {proto!r}."
    low = _port(values.get("port_from"), "port_from", errors)
    high = _port(values.get("port_to"), "port_to", errors)
    if high is None and low is not None and "port_to" not in errors:
        high = low
    if low is None and high is not None and "port_from" not in errors:
        errors["port_from"] = "Give the first port of the range too."
    if low is not None and high is not None and low > high:
        errors["port_to"] = f"The range ends ({high}) before it starts ({low})."
    if proto in (Protocol.ICMP, Protocol.ANY) and (low is not None or high is not None):
        errors["port_from"] = f"A {proto} rule covers every port; ports apply to tcp and udp only."
    cidr, peer = values.get("cidr") or "", values.get("peer_group")
    cidr = cidr.strip() if isinstance(cidr, str) else cidr
    peer_group = None
    if bool(cidr) == (peer not in (None, "")):
        errors["cidr"] = "Name exactly one source (inbound) or destination (outbound): a CIDR or a security group."
    elif cidr:
        net = parse_cidr(cidr, field="cidr", errors=errors)
        cidr = str(net) if net is not None else cidr
        if (net is not None and net.prefixlen == 0 and direction == Direction.INBOUND
                and values.get("confirm_open") is not True):
            errors["confirm_open"] = ("This rule opens the instances to the whole internet (0.0.0.0/0 inbound); "
                                      "confirm it (API: confirm_open: true) if that is what you mean.")
    else:
        pk = getattr(peer, "pk", peer)
        peer_group = SecurityGroup.objects.filter(pk=pk, team_id=group.team_id).first() if str(pk).isdigit() else None
        if peer_group is None:
            errors["peer_group"] = (f"Security group {pk} is not one of team {group.team.name}'s groups; "
                                    "a rule may name only a group of its own team.")
    description = values.get("description") or ""
    if not isinstance(description, str) or len(description) > 200:
        errors["description"] = "A description is text of at most 200 characters."
    if errors:
        raise ValidationError(errors)
    return RuleSpec(direction, proto, low, high, cidr, peer_group, description)


def _rule_details(rule: SecurityRule) -> dict:
    return {"id": rule.pk, "direction": rule.direction, "protocol": rule.protocol, "ports": rule.ports,
            "cidr": rule.cidr, "peer_group": rule.peer_group_id}


# --- VPCs and subnets ---------------------------------------------------------------------


@transaction.atomic
def create_vpc(*, actor, team, name: str, cidr: str, is_default: bool = False) -> Vpc:
    net = check_vpc(team=team, name=name, cidr=cidr)
    vpc = Vpc.objects.create(team=team, name=name, cidr=str(net), is_default=is_default,
                             created_by=actor if getattr(actor, "is_authenticated", False) else None)
    record_event(actor=actor, action="network.vpc.create", target=vpc, team=team,
                 details={"name": name, "cidr": vpc.cidr, "default": is_default})
    return vpc


def _in_use(subnets) -> bool:
    return Interface.objects.filter(subnet__in=subnets, released_at__isnull=True).exists()


@transaction.atomic
def delete_vpc(*, actor, vpc: Vpc) -> None:
    vpc = Vpc.objects.select_for_update().get(pk=vpc.pk)
    if _in_use(vpc.subnets.all()):
        raise ValidationError({"vpc": f"VPC {vpc.name} still has instances; terminate them first."})
    Interface.objects.filter(subnet__vpc=vpc).delete()  # released ones: their addresses are free
    vpc.subnets.all().delete()
    record_event(actor=actor, action="network.vpc.delete", target=vpc, team=vpc.team_id,
                 details={"name": vpc.name, "cidr": vpc.cidr})
    vpc.delete()


@transaction.atomic
def create_subnet(*, actor, vpc: Vpc, name: str, cidr: str, is_default: bool = False) -> Subnet:
    vpc = Vpc.objects.select_for_update().get(pk=vpc.pk)  # two creations at once cannot overlap
    net = check_subnet(vpc=vpc, name=name, cidr=cidr)
    subnet = Subnet.objects.create(vpc=vpc, name=name, cidr=str(net), is_default=is_default)
    record_event(actor=actor, action="network.subnet.create", target=subnet, team=vpc.team_id,
                 details={"name": name, "cidr": subnet.cidr, "vpc": vpc.name})
    return subnet


@transaction.atomic
def delete_subnet(*, actor, subnet: Subnet) -> None:
    if subnet.is_default:
        raise ValidationError({"subnet": "The default subnet cannot be deleted; launches that name no subnet use it."})
    if _in_use([subnet]):
        raise ValidationError({"subnet": f"Subnet {subnet.name} still has instances; terminate them first."})
    Interface.objects.filter(subnet=subnet).delete()
    record_event(actor=actor, action="network.subnet.delete", target=subnet, team=subnet.vpc.team_id,
                 details={"name": subnet.name, "cidr": subnet.cidr})
    subnet.delete()


def _free_range(prefix: int) -> ipaddress.IPv4Network:
    taken = [ipaddress.IPv4Network(c) for c in Vpc.objects.values_list("cidr", flat=True)]
    for pool in PRIVATE:
        for candidate in pool.subnets(new_prefix=prefix):
            if not any(candidate.overlaps(t) for t in taken):
                return candidate
    raise ValidationError({"cidr": "No private /16 is free for a default VPC; create a VPC with a range of your own."})


@transaction.atomic
def ensure_defaults(*, actor, team) -> tuple[Vpc, Subnet, SecurityGroup]:
    """The team's default VPC, its default subnet and the default group, made on demand."""
    from console.models import Team

    Team.objects.select_for_update().get(pk=team.pk)  # one default per team, even when two launches race
    vpc = Vpc.objects.filter(team=team, is_default=True).first()
    if vpc is None:
        vpc = create_vpc(actor=actor, team=team, name="default", cidr=str(_free_range(DEFAULT_VPC_PREFIX)),
                         is_default=True)
    subnet = vpc.subnets.filter(is_default=True).first()
    if subnet is None:
        first = next(ipaddress.IPv4Network(vpc.cidr).subnets(new_prefix=max(DEFAULT_SUBNET_PREFIX, int(vpc.cidr.split("/")[1]))))
        subnet = create_subnet(actor=actor, vpc=vpc, name="default", cidr=str(first), is_default=True)
    return vpc, subnet, default_group(actor=actor, team=team)


def default_group(*, actor, team) -> SecurityGroup:
    """The team's default group: its members reach each other, nothing else comes in, and
    everything may go out."""
    group = SecurityGroup.objects.filter(team=team, is_default=True).first()
    if group is not None:
        return group
    group = SecurityGroup.objects.create(team=team, name="default", is_default=True,
                                         description="members reach each other; no other inbound; all outbound")
    SecurityRule.objects.bulk_create([
        SecurityRule(group=group, direction=Direction.INBOUND, protocol=Protocol.ANY, peer_group=group,
                     description="from members of this group"),
        SecurityRule(group=group, direction=Direction.OUTBOUND, protocol=Protocol.ANY, cidr=EVERYWHERE,
                     description="all outbound"),
    ])
    record_event(actor=actor, action="network.group.create", target=group, team=team,
                 details={"name": group.name, "default": True, "rules": [_rule_details(r) for r in group.rules.all()]})
    return group


# --- security groups ----------------------------------------------------------------------


def _check_group_name(team, name: str, exclude: SecurityGroup | None = None) -> None:
    if SecurityGroup.objects.filter(team=team, name=name).exclude(pk=getattr(exclude, "pk", None)).exists():
        raise ValidationError({"name": f"Team {team.name} already has a security group named {name}."})


@transaction.atomic
def create_group(*, actor, team, name: str, description: str = "", rules: list[dict] | None = None) -> SecurityGroup:
    _check_group_name(team, name)
    group = SecurityGroup.objects.create(team=team, name=name, description=description)
    if rules is None:  # as AWS does: a new group lets nothing in and everything out
        rules = [{"direction": Direction.OUTBOUND, "protocol": Protocol.ANY, "cidr": EVERYWHERE,
                  "description": "all outbound"}]
    _write_rules(group, rules, field="rules")
    record_event(actor=actor, action="network.group.create", target=group, team=team,
                 details={"name": name, "rules": [_rule_details(r) for r in group.rules.all()]})
    resync_on_commit(team.pk)
    return group


def _write_rules(group: SecurityGroup, rules: list[dict], *, field: str) -> list[SecurityRule]:
    if not isinstance(rules, list) or len(rules) > MAX_RULES_PER_GROUP:
        raise ValidationError({field: f"Rules are a list of at most {MAX_RULES_PER_GROUP}."})
    specs, errors = [], {}
    for n, values in enumerate(rules):
        try:
            specs.append(check_rule(values if isinstance(values, dict) else {}, group=group))
        except ValidationError as exc:
            errors.update({f"{field}[{n}].{k}": v for k, v in exc.message_dict.items()})
    if errors:
        raise ValidationError(errors)
    return SecurityRule.objects.bulk_create([SecurityRule(group=group, **vars(spec)) for spec in specs])


@transaction.atomic
def update_group(*, actor, group: SecurityGroup, name: str | None = None, description: str | None = None,
                 rules: list[dict] | None = None) -> SecurityGroup:
    """Rename, describe, or replace every rule of the group at once."""
    group = SecurityGroup.objects.select_for_update().select_related("team").get(pk=group.pk)
    before = [_rule_details(r) for r in group.rules.all()]
    changed = {}
    if name is not None and name != group.name:
        if group.is_default:
            raise ValidationError({"name": "The default group keeps its name."})
        _check_group_name(group.team, name, exclude=group)
        changed["name"] = [group.name, name]
        group.name = name
    if description is not None and description != group.description:
        changed["description"] = [group.description, description]
        group.description = description
    group.save(update_fields=["name", "description"])
    if rules is not None:
        group.rules.all().delete()
        _write_rules(group, rules, field="rules")
        changed["rules"] = {"before": before, "after": [_rule_details(r) for r in group.rules.all()]}
    record_event(actor=actor, action="network.group.update", target=group, team=group.team_id, details=changed)
    resync_on_commit(group.team_id)
    return group


@transaction.atomic
def add_rule(*, actor, group: SecurityGroup, **values) -> SecurityRule:
    group = SecurityGroup.objects.select_for_update().select_related("team").get(pk=group.pk)
    if group.rules.count() >= MAX_RULES_PER_GROUP:
        raise ValidationError({"rules": f"A group holds at most {MAX_RULES_PER_GROUP} rules."})
    spec = check_rule(values, group=group)
    rule = SecurityRule.objects.create(group=group, **vars(spec))
    record_event(actor=actor, action="network.rule.add", target=group, team=group.team_id,
                 details={"group": group.name, "rule": _rule_details(rule)})
    resync_on_commit(group.team_id)
    return rule


@transaction.atomic
def remove_rule(*, actor, rule: SecurityRule) -> None:
    group = SecurityGroup.objects.select_for_update().get(pk=rule.group_id)
    record_event(actor=actor, action="network.rule.remove", target=group, team=group.team_id,
                 details={"group": group.name, "rule": _rule_details(rule)})
    rule.delete()
    resync_on_commit(group.team_id)


@transaction.atomic
def delete_group(*, actor, group: SecurityGroup) -> None:
    if group.is_default:
        raise ValidationError({"group": "The default group cannot be deleted."})
    if group.interfaces.filter(released_at__isnull=True).exists():
        raise ValidationError({"group": f"Instances are in group {group.name}; take them out first."})
    users = SecurityRule.objects.filter(peer_group=group).exclude(group=group).select_related("group")
    if users:
        names = ", ".join(sorted({r.group.name for r in users}))
        raise ValidationError({"group": f"Rules of {names} name group {group.name}; remove them first."})
    record_event(actor=actor, action="network.group.delete", target=group, team=group.team_id,
                 details={"name": group.name, "rules": [_rule_details(r) for r in group.rules.all()]})
    group.rules.all().delete()
    group.interfaces.clear()
    group.delete()


# --- interfaces ---------------------------------------------------------------------------


def _check_groups(groups, team, errors: dict) -> list[SecurityGroup]:
    ids = [getattr(g, "pk", g) for g in groups]
    if not ids or len(ids) > MAX_GROUPS_PER_INTERFACE:
        errors["security_groups"] = f"Name 1 to {MAX_GROUPS_PER_INTERFACE} security groups."
        return []
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
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


# --- what each host enforces --------------------------------------------------------------


def resync_on_commit(team_id: int, hosts=()) -> None:
    transaction.on_commit(lambda: resync(team_id=team_id, hosts=hosts))


def resync(*, team_id: int | None = None, hosts=()) -> list[HostRules]:
    """Bring the desired rules of the team's hosts (and ``hosts``) up to date."""
    ids = {h for h in hosts if h}
    if team_id is not None:
        live = _live().filter(team_id=team_id)
        for host_id, placed_on in live.values_list("instance__host_id", "placed_on_id"):
            ids |= {host_id, placed_on}
    return [sync_host(host_id=h) for h in sorted(i for i in ids if i)]


def _live():
    return Interface.objects.filter(released_at__isnull=True)


def _on_host(host_id: int):
    return _live().filter(instance__host_id=host_id, instance__state__in=HOLDING_STATES)


def desired(host_id: int) -> tuple[list[wire.NetInterface], dict[str, list[str]]]:
    """The interfaces of the instances on the host with their groups' rules, and the
    members' addresses (wherever they run) of each group a rule names as its peers.
    Read as plain rows, four queries whatever the size; interfaces with the same groups
    share their rule lists."""
    interfaces = list(_on_host(host_id).values_list("pk", "instance_id", "address"))
    through = SecurityGroup.interfaces.through.objects
    groups_of: dict[int, list[int]] = {}
    for interface_id, group_id in through.filter(interface_id__in=[i[0] for i in interfaces]).values_list(
            "interface_id", "securitygroup_id"):
        groups_of.setdefault(interface_id, []).append(group_id)
    rules = list(SecurityRule.objects.filter(group_id__in={g for gs in groups_of.values() for g in gs}).values_list(
        "group_id", "direction", "protocol", "port_from", "port_to", "cidr", "peer_group_id"))
    peers = _group_addresses({r[6] for r in rules if r[6]})
    by_group: dict[int, list[tuple]] = {}
    for rule in rules:
        by_group.setdefault(rule[0], []).append(rule)
    shared: dict[tuple[int, ...], tuple[list, list]] = {}
    out = []
    for pk, instance_id, address in interfaces:
        key = tuple(sorted(groups_of.get(pk, [])))
        if key not in shared:
            mine = [r for g in key for r in by_group.get(g, [])]
            shared[key] = (_net_rules([r for r in mine if r[1] == Direction.INBOUND], peers),
                           _net_rules([r for r in mine if r[1] == Direction.OUTBOUND], peers))
        inbound, outbound = shared[key]
        out.append(wire.NetInterface(ifname=ifname(instance_id), address=f"{address}/32", inbound=inbound,
                                     outbound=outbound))
    named = {r.group for i in out for r in (*i.inbound, *i.outbound) if r.group}
    return sorted(out, key=lambda i: i.ifname), {g: sorted(peers[int(g[1:])]) for g in sorted(named)}


def _group_addresses(group_ids: set) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {g: [] for g in group_ids if g}
    rows = _live().filter(groups__in=list(found), instance__state__in=HOLDING_STATES).values_list("groups", "address")
    for group_id, address in rows:
        found[group_id].append(f"{address}/32")
    return found


def _net_rules(rules: list[tuple], peers: dict[int, list[str]]) -> list[wire.NetRule]:
    """Rows of (group, direction, protocol, port_from, port_to, cidr, peer group) as wire
    rules: deduplicated, in one order."""
    out = set()
    for _, _, protocol, port_from, port_to, cidr, peer_group in rules:
        if not cidr and not peers.get(peer_group):  # a group with no members yet allows nothing
            continue
        ports = None if port_from is None else (port_from, port_to)
        out.add((protocol, cidr, f"g{peer_group}" if not cidr else "", ports))
    return [wire.NetRule(proto=p, peers=[cidr] if cidr else [], group=group, ports=ports)
            for p, cidr, group, ports in sorted(out, key=lambda x: (x[0], x[1], x[2], x[3] or (-1, -1)))]


def sync_host(*, host_id: int, now: datetime | None = None) -> HostRules:
    """Compute the host's rules; when they changed, the next version, sent to its agent."""
    interfaces, groups = desired(host_id)
    digest = wire.ruleset_digest(interfaces, groups)
    with transaction.atomic():
        try:
            rules, _ = HostRules.objects.select_for_update().get_or_create(host_id=host_id)
        except IntegrityError:  # made by a concurrent sync in between
            rules = HostRules.objects.select_for_update().get(host_id=host_id)
        if rules.hash == digest and rules.version:
            return rules
        rules.version += 1
        rules.hash = digest
        rules.frame = wire.encode(wire.Ruleset(version=rules.version, hash=digest, interfaces=interfaces,
                                               groups=groups))
        rules.changed_at = now or timezone.now()
        # The agent's word on an older version no longer applies; a frame too large to
        # send is never sent (the host shows as refused, and operators are alerted).
        too_large = len(rules.frame) > wire.MAX_FRAME_BYTES
        rules.error = (f"the ruleset is {len(rules.frame)} bytes, over the {wire.MAX_FRAME_BYTES} one frame may "
                       "carry; it was not sent") if too_large else ""
        rules.save(update_fields=["version", "hash", "frame", "changed_at", "error"])
        _on_host(host_id).update(placed_on_id=host_id)
        record_event(actor="system", action="network.rules.version", target=rules.host, team=None,
                     details={"version": rules.version, "hash": digest, "interfaces": len(interfaces)})
        frame = rules.frame
        if not too_large:
            transaction.on_commit(lambda: push(host_id, frame))
    return rules


def host_group(host_id: int) -> str:
    """The channel group of a host's agent connection (monitoring.consumers joins it)."""
    return f"agent-network-{host_id}"


def push(host_id: int, frame: str) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(host_group(host_id), {"type": "network.ruleset", "frame": frame})
    except Exception:  # the agent gets it on its next connection
        log.warning("could not send network rules to host %s", host_id, exc_info=True)


def current_frame(host_id: int) -> str | None:
    """The ruleset frame a connecting agent gets first (None: nothing to enforce yet, or
    too large to send)."""
    rules = HostRules.objects.filter(host_id=host_id).only("frame").first()
    if rules is None or not rules.frame or len(rules.frame) > wire.MAX_FRAME_BYTES:
        return None
    return rules.frame


@transaction.atomic
def record_report(*, host: Host, report: wire.RulesetApplied, now: datetime | None = None) -> HostRules:
    """What the host's agent says is in force, and why an offered version was refused."""
    now = now or timezone.now()
    rules = HostRules.objects.select_for_update().filter(host=host).first()
    if rules is None:
        rules = HostRules.objects.create(host=host)
    moved = (rules.applied_version, rules.applied_hash) != (report.version, report.hash)
    # A host that keeps refusing (e.g. an agent without --network, asked again every 10 s)
    # is audited once per version and reason, not on every answer.
    new_refusal = not report.ok and report.error != rules.error
    rules.applied_version, rules.applied_hash = report.version, report.hash
    rules.reported_at = now
    rules.error = "" if report.ok else report.error
    if moved:
        rules.applied_at = now
    rules.save(update_fields=["applied_version", "applied_hash", "reported_at", "error", "applied_at"])
    if moved or new_refusal:
        record_event(actor="system", action="network.rules.applied" if report.ok else "network.rules.refused",
                     target=host, outcome="success" if report.ok else "failure",
                     details={"version": report.version, "hash": report.hash, "offered": report.offered,
                              "error": report.error})
    return rules


# --- state shown in the console -----------------------------------------------------------


@dataclass(frozen=True)
class Applied:
    state: str  # "applied", "pending", "drift", "refused", "none"
    text: str


def applied_state(rules: HostRules | None, *, now: datetime | None = None) -> Applied:
    """How a host's rules stand, in words."""
    now = now or timezone.now()
    if rules is None or rules.version == 0:
        return Applied("none", "no rules sent yet")
    if rules.in_force:
        return Applied("applied", f"rules applied at version {rules.version}")
    if rules.error:
        return Applied("refused", f"version {rules.version} not applied ({rules.error}); "
                                  f"version {rules.applied_version} in force")
    late = now - rules.changed_at > APPLY_WITHIN
    word = "drift" if late else "pending"
    what = (f"version {rules.applied_version} in force" if rules.applied_version else "nothing applied")
    return Applied(word, f"{'drift' if late else 'applying'}: version {rules.version} wanted, {what}")


def overdue(now: datetime | None = None) -> list[HostRules]:
    """Hosts that have not applied their latest version within APPLY_WITHIN."""
    now = now or timezone.now()
    return list(not_in_force().filter(changed_at__lt=now - APPLY_WITHIN).select_related("host"))


def not_in_force():
    """Hosts whose latest version is not the one they applied (``HostRules.in_force``, in SQL)."""
    return HostRules.objects.filter(version__gt=0).filter(~Q(applied_version=F("version")) | ~Q(applied_hash=F("hash")))
