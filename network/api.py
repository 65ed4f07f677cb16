from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response

from console.api.mixins import TeamScopedViewSetMixin

from . import interfaces, security_groups, vpcs
from .models import Interface, SecurityGroup, SecurityRule, Subnet, Vpc
from .serializers import (
    InterfaceSerializer,
    RuleSerializer,
    SecurityGroupSerializer,
    SubnetSerializer,
    VpcSerializer,
)


class VpcViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin,
                 viewsets.ReadOnlyModelViewSet):
    """A team's private IPv4 ranges. Ranges are unique across the platform (no overlay)."""

    queryset = Vpc.objects.select_related("team").prefetch_related("subnets")
    serializer_class = VpcSerializer
    filterset_fields = ["team"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("team.write", data["team"], "create VPCs")
        serializer.instance = vpcs.create_vpc(actor=self.request.user, team=data["team"], name=data["name"],
                                                  cidr=data["cidr"])

    def perform_destroy(self, vpc):
        self.require("team.write", vpc, "delete VPCs")
        if vpc.is_default:
            from django.core.exceptions import ValidationError

            raise ValidationError({"vpc": "The default VPC cannot be deleted."})
        vpcs.delete_vpc(actor=self.request.user, vpc=vpc)


class SubnetViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin,
                    viewsets.ReadOnlyModelViewSet):
    """Subnets: inside their VPC, not overlapping each other. Instances get addresses in them."""

    queryset = Subnet.objects.select_related("vpc")
    serializer_class = SubnetSerializer
    filterset_fields = ["vpc"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("team.write", data["vpc"], "create subnets")
        serializer.instance = vpcs.create_subnet(actor=self.request.user, vpc=data["vpc"], name=data["name"],
                                                     cidr=data["cidr"])

    def perform_destroy(self, subnet):
        self.require("team.write", subnet.vpc, "delete subnets")
        vpcs.delete_subnet(actor=self.request.user, subnet=subnet)


class SecurityGroupViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, mixins.UpdateModelMixin,
                           mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Allow rules, stateful (replies pass). PATCH ``rules`` replaces every rule at once;
    ``rules/`` adds one and ``rules/{id}/`` removes one. Hosts apply a change within seconds."""

    queryset = SecurityGroup.objects.select_related("team").prefetch_related("rules")
    serializer_class = SecurityGroupSerializer
    filterset_fields = ["team"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("team.write", data["team"], "create security groups")
        serializer.instance = security_groups.create_group(
            actor=self.request.user, team=data["team"], name=data["name"], description=data.get("description", ""),
            rules=self.request.data.get("rules") if isinstance(self.request.data, dict) else None,
        )

    def perform_update(self, serializer):
        group = serializer.instance
        self.require("team.write", group, "change security groups")
        data = serializer.validated_data
        rules = self.request.data.get("rules") if "rules" in data else None
        serializer.instance = security_groups.update_group(actor=self.request.user, group=group, name=data.get("name"),
                                                    description=data.get("description"), rules=rules)

    def perform_destroy(self, group):
        self.require("team.write", group, "delete security groups")
        security_groups.delete_group(actor=self.request.user, group=group)

    @extend_schema(request=RuleSerializer, responses=RuleSerializer)
    @action(detail=True, methods=["post"], url_path="rules")
    def add_rule(self, request, pk=None):
        group = self.get_object()
        self.require("team.write", group, "change security groups")
        body = request.data if isinstance(request.data, dict) else {}
        rule = security_groups.add_rule(actor=request.user, group=group, **{k: body.get(k) for k in (
            "direction", "protocol", "port_from", "port_to", "cidr", "peer_group", "confirm_open", "description")})
        return Response(RuleSerializer(rule).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=None)
    @action(detail=True, methods=["delete"], url_path=r"rules/(?P<rule_id>[0-9]+)")
    def remove_rule(self, request, pk=None, rule_id=None):
        group = self.get_object()
        self.require("team.write", group, "change security groups")
        rule = get_object_or_404(SecurityRule.objects.filter(group=group), pk=rule_id)
        security_groups.remove_rule(actor=request.user, rule=rule)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InterfaceViewSet(TeamScopedViewSetMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Instances' interfaces: address, groups and whether the host applied their rules."""

    queryset = Interface.objects.select_related("instance__host__network_rules", "subnet").prefetch_related("groups")
    serializer_class = InterfaceSerializer
    filterset_fields = ["instance", "subnet", "team"]
    http_method_names = ["get", "patch", "head", "options"]

    def perform_update(self, serializer):
        interface = serializer.instance
        self.require("team.write", interface, "change instances' security groups")
        groups = serializer.validated_data.get("group_ids")
        if groups is not None:
            serializer.instance = interfaces.set_groups(actor=self.request.user, interface=interface,
                                                      groups=groups if isinstance(groups, list) else [groups])


routes = [
    ("vpcs", VpcViewSet, "vpc"),
    ("subnets", SubnetViewSet, "subnet"),
    ("security-groups", SecurityGroupViewSet, "security-group"),
    ("network-interfaces", InterfaceViewSet, "network-interface"),
]
