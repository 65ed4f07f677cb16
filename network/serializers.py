"""API shapes. Every rule on values (CIDRs, ports, sources, names taken) is checked by
``network.checks`` (through the verbs), one place for the API and the pages; these only read and write."""

from rest_framework import serializers

from console.models import Team
from console.validators import plain_name

from . import rulesets
from .models import Interface, SecurityGroup, SecurityRule, Subnet, Vpc


class OwnTeams(serializers.ModelSerializer):
    """``team`` offers only the teams the user may write to."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if "team" in self.fields and request is not None and not self.fields["team"].read_only:
            from console.tenancy import WRITE_ROLES

            self.fields["team"].queryset = Team.objects.for_user(request.user, WRITE_ROLES)


class VpcSerializer(OwnTeams):
    team = serializers.PrimaryKeyRelatedField(queryset=Team.objects.none())
    name = serializers.CharField(max_length=48, validators=[plain_name])
    cidr = serializers.CharField(max_length=18, help_text="private IPv4 range, a /16 to a /28, e.g. 10.20.0.0/16")
    subnets = serializers.SerializerMethodField()

    class Meta:
        model = Vpc
        fields = ["id", "team", "name", "cidr", "is_default", "subnets", "created_at"]
        read_only_fields = ["is_default", "created_at"]
        validators = []  # a taken name is refused by the service, with its name

    def get_subnets(self, vpc) -> list[dict]:
        return [{"id": s.pk, "name": s.name, "cidr": s.cidr} for s in vpc.subnets.all()]


class SubnetSerializer(serializers.ModelSerializer):
    vpc = serializers.PrimaryKeyRelatedField(queryset=Vpc.objects.none())
    name = serializers.CharField(max_length=48, validators=[plain_name])
    cidr = serializers.CharField(max_length=18, help_text="inside its VPC, overlapping no other subnet of it")
    team = serializers.IntegerField(source="vpc.team_id", read_only=True)
    free_addresses = serializers.SerializerMethodField()

    class Meta:
        model = Subnet
        fields = ["id", "vpc", "team", "name", "cidr", "is_default", "free_addresses", "created_at"]
        read_only_fields = ["is_default", "created_at"]
        validators = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            from console.tenancy import WRITE_ROLES

            self.fields["vpc"].queryset = Vpc.objects.for_user(request.user, WRITE_ROLES)

    def get_free_addresses(self, subnet) -> int:
        import ipaddress

        used = getattr(subnet, "used", None)
        size = ipaddress.IPv4Network(subnet.cidr).num_addresses - 3  # network, gateway, broadcast
        return max(0, size - (used or 0))


class RuleSerializer(serializers.ModelSerializer):
    """A rule as written: ``cidr`` or ``peer_group`` (a group id of the same team);
    ``confirm_open`` must be true for an inbound rule from 0.0.0.0/0."""

    direction = serializers.CharField()
    protocol = serializers.CharField()
    port_from = serializers.JSONField(required=False, allow_null=True)
    port_to = serializers.JSONField(required=False, allow_null=True)
    cidr = serializers.CharField(required=False, allow_blank=True, max_length=18)
    peer_group = serializers.JSONField(required=False, allow_null=True)
    confirm_open = serializers.BooleanField(required=False, write_only=True)
    description = serializers.CharField(required=False, allow_blank=True, max_length=200)

    class Meta:
        model = SecurityRule
        fields = ["id", "direction", "protocol", "port_from", "port_to", "cidr", "peer_group", "confirm_open",
                  "description"]

    def to_representation(self, rule):
        return {"id": rule.pk, "direction": rule.direction, "protocol": rule.protocol, "port_from": rule.port_from,
                "port_to": rule.port_to, "cidr": rule.cidr, "peer_group": rule.peer_group_id,
                "description": rule.description}


class SecurityGroupSerializer(OwnTeams):
    team = serializers.PrimaryKeyRelatedField(queryset=Team.objects.none())
    name = serializers.CharField(max_length=48, validators=[plain_name])
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    rules = RuleSerializer(many=True, required=False)

    class Meta:
        model = SecurityGroup
        fields = ["id", "team", "name", "description", "is_default", "rules", "created_at"]
        read_only_fields = ["is_default", "created_at"]
        validators = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance is not None and not isinstance(self.instance, list | tuple) and not hasattr(self.instance, "all"):
            self.fields["team"].read_only = True


class InterfaceSerializer(serializers.ModelSerializer):
    """An instance's address and groups; PATCH ``security_groups`` (ids) to change them."""

    instance = serializers.IntegerField(source="instance_id", read_only=True)
    instance_name = serializers.CharField(source="instance.name", read_only=True)
    subnet = serializers.IntegerField(source="subnet_id", read_only=True)
    vpc = serializers.IntegerField(source="subnet.vpc_id", read_only=True)
    security_groups = serializers.JSONField(source="group_ids", help_text="security group ids")
    rules = serializers.SerializerMethodField(help_text="the host's rules: applied at version N, pending or drift")

    class Meta:
        model = Interface
        fields = ["id", "instance", "instance_name", "team", "vpc", "subnet", "address", "security_groups",
                  "rules", "released_at"]
        read_only_fields = ["team", "address", "released_at"]

    def get_rules(self, interface) -> dict:
        host = interface.instance.host if interface.released_at is None else None
        state = rulesets.applied_state(getattr(host, "network_rules", None) if host is not None else None)
        return {"state": state.state, "text": state.text}
