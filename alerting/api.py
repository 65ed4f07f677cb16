"""Alerting API: alerts (acknowledge, resolve, silence), alert rules, notification
channels and their delivery log, silences."""

from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console.api.mixins import TeamScopedViewSetMixin
from console.policy import FLEET, may

from . import services
from .models import Alert, AlertRule, NotificationChannel, Silence
from .serializers import (
    AlertRuleSerializer,
    AlertRuleUpdateSerializer,
    AlertSerializer,
    DeliverySerializer,
    NewNotificationChannelSerializer,
    NotificationChannelSerializer,
    NotificationChannelUpdateSerializer,
    SilenceRequestSerializer,
    SilenceSerializer,
)


class OwnedMixin(TeamScopedViewSetMixin):
    """Rules, channels and silences belong to a team (its admins change them) or, with
    no team, to the operators."""

    def require_owner(self, team_id: int | None, what: str) -> None:
        if team_id is None:
            if not may(self.request.user, "alert.configure", FLEET):
                self.permission_denied(self.request, message=f"Only operators can {what} without a team.")
            return
        self.require("alert.configure", team_id, what)


class AlertViewSet(OwnedMixin, viewsets.ReadOnlyModelViewSet):
    """Every kind of alert (telemetry, budget, billing, audit) of your teams (operators:
    every alert). Acknowledge, resolve or silence one with POST …/{id}/<verb>/."""

    queryset = Alert.objects.select_related("host", "acknowledged_by", "resolved_by")
    serializer_class = AlertSerializer
    filterset_fields = ["kind", "category", "severity", "state", "team", "instance", "rule"]
    ordering_fields = ["opened_at", "updated_at"]

    def _may_act(self, alert: Alert, what: str) -> None:
        if alert.team_id is None:
            if not may(self.request.user, "alert.act", FLEET):
                self.permission_denied(self.request, message=f"Only operators can {what} fleet alerts.")
        else:
            self.require("alert.act", alert, f"{what} alerts")

    def _answer(self, alert: Alert) -> Response:
        return Response(AlertSerializer(self.get_queryset().get(pk=alert.pk)).data)

    @extend_schema(request=None, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request, pk=None):
        alert = self.get_object()
        self._may_act(alert, "acknowledge")
        alert = services.acknowledge_alert(actor=request.user, alert=alert)
        return self._answer(alert)

    @extend_schema(request=None, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def resolve(self, request, pk=None):
        alert = self.get_object()
        self._may_act(alert, "resolve")
        alert = services.resolve_alert(actor=request.user, alert=alert)
        return self._answer(alert)

    @extend_schema(request=SilenceRequestSerializer, responses={201: SilenceSerializer})
    @action(detail=True, methods=["post"])
    def silence(self, request, pk=None):
        alert = self.get_object()
        self._may_act(alert, "silence")
        form = SilenceRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        found = services.silence(actor=request.user, alert=alert, **form.validated_data)
        return Response(SilenceSerializer(found).data, status=status.HTTP_201_CREATED)


class AlertRuleViewSet(OwnedMixin, viewsets.ModelViewSet):
    """Alert rules: a team's (its admins manage them; they watch the team's instances)
    or the operators' (no team; the fleet, a host or a GPU model). ``metric`` is one of
    the metrics docs/telemetry.md lists; the condition must hold ``hold_s`` seconds."""

    queryset = AlertRule.objects.select_related("host", "gpu_model")
    serializer_class = AlertRuleSerializer
    filterset_fields = ["team", "metric", "severity", "enabled"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        team = data.pop("team", None)
        self.require_owner(team.pk if team else None, "manage alert rules")
        serializer.instance = services.create_rule(actor=self.request.user, team=team, **data)

    @extend_schema(request=AlertRuleUpdateSerializer, responses=AlertRuleSerializer)
    def partial_update(self, request, *args, **kwargs):
        rule = self.get_object()
        self.require_owner(rule.team_id, "manage alert rules")
        form = AlertRuleUpdateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        rule = services.update_rule(actor=request.user, rule=rule, **form.validated_data)
        return Response(AlertRuleSerializer(self.get_queryset().get(pk=rule.pk), context={"request": request}).data)

    def perform_destroy(self, instance):
        self.require_owner(instance.team_id, "manage alert rules")
        services.delete_rule(actor=self.request.user, rule=instance)

    @extend_schema(request=SilenceRequestSerializer, responses={201: SilenceSerializer})
    @action(detail=True, methods=["post"])
    def silence(self, request, pk=None):
        rule = self.get_object()
        self.require_owner(rule.team_id, "silence alert rules")
        form = SilenceRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        found = services.silence(actor=request.user, rule=rule, **form.validated_data)
        return Response(SilenceSerializer(found).data, status=status.HTTP_201_CREATED)


class NotificationChannelViewSet(OwnedMixin, viewsets.ModelViewSet):
    """Where alerts go: email, a signed JSON webhook (``X-GPUConsole-Signature:
    sha256=<HMAC of the body>``; the secret is in the creation answer only) or a
    Slack-compatible incoming webhook. POST …/{id}/test/ sends a test message now."""

    queryset = NotificationChannel.objects.all()
    serializer_class = NotificationChannelSerializer
    filterset_fields = ["team", "kind", "enabled"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    @extend_schema(request=NotificationChannelSerializer, responses={201: NewNotificationChannelSerializer})
    def create(self, request, *args, **kwargs):
        form = NotificationChannelSerializer(data=request.data, context={"request": request})
        form.is_valid(raise_exception=True)
        data = form.validated_data
        team = data.pop("team", None)
        self.require_owner(team.pk if team else None, "manage notification channels")
        channel = services.create_channel(actor=request.user, team=team, **data)
        body = NewNotificationChannelSerializer(channel, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=NotificationChannelUpdateSerializer, responses=NewNotificationChannelSerializer)
    def partial_update(self, request, *args, **kwargs):
        channel = self.get_object()
        self.require_owner(channel.team_id, "manage notification channels")
        form = NotificationChannelUpdateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        rotate = form.validated_data.get("rotate_secret", False)
        channel = services.update_channel(actor=request.user, channel=channel, **form.validated_data)
        serializer = NewNotificationChannelSerializer if rotate else NotificationChannelSerializer
        return Response(serializer(channel, context={"request": request}).data)

    def perform_destroy(self, instance):
        self.require_owner(instance.team_id, "manage notification channels")
        services.delete_channel(actor=self.request.user, channel=instance)

    @extend_schema(request=None, responses=DeliverySerializer)
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        channel = self.get_object()
        self.require_owner(channel.team_id, "test notification channels")
        delivery = services.send_test(actor=request.user, channel=channel)
        return Response(DeliverySerializer(delivery).data)

    @extend_schema(responses=DeliverySerializer(many=True))
    @action(detail=True, methods=["get"])
    def deliveries(self, request, pk=None):
        """The delivery log: the channel's last 100 attempts, newest first."""
        channel = self.get_object()
        return Response(DeliverySerializer(channel.deliveries.all()[:100], many=True).data)


class SilenceViewSet(OwnedMixin, viewsets.ReadOnlyModelViewSet):
    """Silences (made with POST /alerts/{id}/silence/ or /alert-rules/{id}/silence/);
    end one early with POST …/{id}/end/."""

    queryset = Silence.objects.select_related("created_by")
    serializer_class = SilenceSerializer
    filterset_fields = ["team", "rule"]

    @extend_schema(request=None, responses=SilenceSerializer)
    @action(detail=True, methods=["post"])
    def end(self, request, pk=None):
        found = self.get_object()
        self.require_owner(found.team_id, "end silences")
        return Response(SilenceSerializer(services.end_silence(actor=request.user, silence=found)).data)


routes = [
    ("alerts", AlertViewSet, "alert"),
    ("alert-rules", AlertRuleViewSet, "alert-rule"),
    ("notification-channels", NotificationChannelViewSet, "notification-channel"),
    ("alert-silences", SilenceViewSet, "alert-silence"),
]
