"""A team's VPCs and subnets, and the defaults (VPC, subnet, security group) every team
starts with. Each verb writes its rows and its audit record in one transaction."""

from __future__ import annotations

import ipaddress

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.recording import record_event

from .checks import (
    DEFAULT_SUBNET_PREFIX,
    DEFAULT_VPC_PREFIX,
    EVERYWHERE,
    PRIVATE,
    check_subnet,
    check_vpc,
)
from .models import (
    Direction,
    Interface,
    Protocol,
    SecurityGroup,
    SecurityRule,
    Subnet,
    Vpc,
)
from .security_groups import rule_details


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
                 details={"name": group.name, "default": True, "rules": [rule_details(r) for r in group.rules.all()]})
    return group
