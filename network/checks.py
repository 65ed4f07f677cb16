"""The checks every network verb makes first, each naming what is wrong (a
``ValidationError`` keyed by field). Addresses are unique across the platform (there
is no overlay network): a VPC's range may not overlap any other VPC's, so an address
names one instance on every host."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from django.core.exceptions import ValidationError

from console.validators import whole_number

from .models import (
    Direction,
    Protocol,
    SecurityGroup,
    Vpc,
)

PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
PREFIXES = (16, 28)  # a VPC or subnet is between a /16 and a /28
DEFAULT_VPC_PREFIX = 16
DEFAULT_SUBNET_PREFIX = 20
EVERYWHERE = "0.0.0.0/0"
MAX_RULES_PER_GROUP = 100


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
    port = whole_number(value if isinstance(value, int) else str(value).strip() if isinstance(value, str) else None)
    if port is None:
        errors[field] = f"A port is a whole number from 0 to 65535; got {value!r}."
        return None
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
        number = whole_number(pk if isinstance(pk, int) else str(pk))
        peer_group = SecurityGroup.objects.filter(pk=number, team_id=group.team_id).first() if number is not None else None
        if peer_group is None:
            errors["peer_group"] = (f"Security group {pk} is not one of team {group.team.name}'s groups; "
                                    "a rule may name only a group of its own team.")
    description = values.get("description") or ""
    if not isinstance(description, str) or len(description) > 200:
        errors["description"] = "A description is text of at most 200 characters."
    if errors:
        raise ValidationError(errors)
    return RuleSpec(direction, proto, low, high, cidr, peer_group, description)
