"""A team's networks: VPCs (a private IPv4 range), subnets inside them, security groups
of allow rules, and each instance's interface (its address and groups). ``HostRules``
is what the console wants a host to enforce and what the host's agent last reported.
Rows change only through the verbs of network.vpcs, security_groups, interfaces and rulesets."""

from django.db import models
from django.utils import timezone

from console.tenancy import TeamScopedQuerySet
from console.validators import plain_name


class Vpc(models.Model):
    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="vpcs")
    name = models.CharField(max_length=48, validators=[plain_name])
    cidr = models.CharField(max_length=18, help_text="private IPv4 range, e.g. 10.20.0.0/16")
    is_default = models.BooleanField(default=False)
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="one_vpc_name_per_team"),
            models.UniqueConstraint(fields=["team"], condition=models.Q(is_default=True), name="one_default_vpc_per_team"),
        ]

    def __str__(self) -> str:
        return self.name


class Subnet(models.Model):
    vpc = models.ForeignKey(Vpc, on_delete=models.PROTECT, related_name="subnets")
    name = models.CharField(max_length=48, validators=[plain_name])
    cidr = models.CharField(max_length=18)
    is_default = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="vpc__team")

    class Meta:
        ordering = ["vpc__name", "name"]
        constraints = [models.UniqueConstraint(fields=["vpc", "name"], name="one_subnet_name_per_vpc")]

    def __str__(self) -> str:
        return self.name


class SecurityGroup(models.Model):
    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="security_groups")
    name = models.CharField(max_length=48, validators=[plain_name])
    description = models.CharField(max_length=200, blank=True)
    is_default = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["team__name", "-is_default", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="one_group_name_per_team"),
            models.UniqueConstraint(fields=["team"], condition=models.Q(is_default=True),
                                    name="one_default_group_per_team"),
        ]

    def __str__(self) -> str:
        return self.name


class Direction(models.TextChoices):
    INBOUND = "inbound", "Inbound"
    OUTBOUND = "outbound", "Outbound"


class Protocol(models.TextChoices):
    TCP = "tcp", "TCP"
    UDP = "udp", "UDP"
    ICMP = "icmp", "ICMP"
    ANY = "any", "Any"


class SecurityRule(models.Model):
    """Allows traffic: inbound from, or outbound to, a CIDR or the members of a group."""

    group = models.ForeignKey(SecurityGroup, on_delete=models.CASCADE, related_name="rules")
    direction = models.CharField(max_length=8, choices=Direction.choices)
    protocol = models.CharField(max_length=4, choices=Protocol.choices)
    # tcp/udp: the destination port range; empty: every port (icmp and any have none).
    port_from = models.PositiveIntegerField(null=True, blank=True)
    port_to = models.PositiveIntegerField(null=True, blank=True)
    cidr = models.CharField(max_length=18, blank=True)
    peer_group = models.ForeignKey(SecurityGroup, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="group__team")

    class Meta:
        ordering = ["direction", "id"]

    def __str__(self) -> str:
        return f"{self.direction} {self.protocol} {self.ports} {self.peer}"

    @property
    def ports(self) -> str:
        if self.port_from is None:
            return "all"
        return str(self.port_from) if self.port_from == self.port_to else f"{self.port_from}-{self.port_to}"

    @property
    def peer(self) -> str:
        return f"group {self.peer_group.name}" if self.peer_group_id else self.cidr


class Interface(models.Model):
    """An instance's network interface: its private address in a subnet and its groups."""

    instance = models.OneToOneField("instances.Instance", on_delete=models.CASCADE, related_name="interface")
    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="+")
    subnet = models.ForeignKey(Subnet, on_delete=models.PROTECT, related_name="interfaces")
    address = models.GenericIPAddressField(protocol="IPv4")
    groups = models.ManyToManyField(SecurityGroup, related_name="interfaces")
    # The host whose rules last listed it: told to drop it when the instance moves or ends.
    placed_on = models.ForeignKey("instances.Host", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Set when the instance is terminated: the address is free again.
    released_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["address"]
        constraints = [models.UniqueConstraint(fields=["address"], condition=models.Q(released_at__isnull=True),
                                               name="one_interface_per_address")]

    def __str__(self) -> str:
        return f"{self.address} ({self.instance_id})"

    @property
    def group_ids(self) -> list[int]:
        return [g.pk for g in self.groups.all()]

    @property
    def ifname(self) -> str:
        return ifname(self.instance_id)


def ifname(instance_id: int) -> str:
    """The host end of an instance's link, as the host's agent knows it."""
    return f"gc{instance_id}"


class HostRules(models.Model):
    """The ruleset a host should enforce (``version``, ``hash``, the frame sent) and what
    its agent last reported (``applied_*``)."""

    host = models.OneToOneField("instances.Host", on_delete=models.CASCADE, related_name="network_rules")
    version = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, blank=True)
    frame = models.TextField(blank=True, help_text="the ruleset frame of this version, as sent")
    changed_at = models.DateTimeField(default=timezone.now)
    applied_version = models.PositiveBigIntegerField(default=0)
    applied_hash = models.CharField(max_length=64, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    reported_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=1024, blank=True, help_text="why the last offered version was not applied")

    class Meta:
        verbose_name_plural = "host rules"

    def __str__(self) -> str:
        return f"{self.host_id} v{self.version}"

    @property
    def in_force(self) -> bool:
        return self.applied_version == self.version and self.applied_hash == self.hash
