from rest_framework import serializers

from console.models import Team
from console.validators import no_control_characters, plain_name
from instances.models import GpuModel, Host, Instance

from .models import (
    Alert,
    AlertRule,
    ChannelKind,
    Comparison,
    Delivery,
    NotificationChannel,
    Severity,
    Silence,
)
from .rules import METRICS, describe


class AlertSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    acknowledged_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    resolved_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Alert
        fields = [
            "id", "kind", "category", "severity", "state", "key", "message", "value", "threshold", "count",
            "host", "uuid", "instance", "team", "rule", "opened_at", "updated_at", "acknowledged_at",
            "acknowledged_by", "resolved_at", "resolved_by",
        ]
        read_only_fields = fields


class _Scoped(serializers.PrimaryKeyRelatedField):
    """A row of a team the requesting user can see (another team's reads as absent)."""

    model = Team

    def get_queryset(self):
        request = self.context.get("request")
        return self.model.objects.for_user(request.user) if request else self.model.objects.none()


class TeamField(_Scoped):
    model = Team


class InstanceField(_Scoped):
    model = Instance


class AlertRuleSerializer(serializers.ModelSerializer):
    team = TeamField(required=False, allow_null=True, default=None,
                     help_text="empty: an operators' rule (fleet, a host or a GPU model)")
    instance = InstanceField(required=False, allow_null=True, default=None)
    host = serializers.SlugRelatedField(slug_field="name", queryset=Host.objects.all(), required=False,
                                        allow_null=True, default=None)
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all(), required=False,
                                             allow_null=True, default=None)
    name = serializers.CharField(max_length=80, validators=[no_control_characters])
    metric = serializers.ChoiceField(choices=[(m, spec.label) for m, spec in METRICS.items()])
    comparison = serializers.ChoiceField(choices=Comparison.choices, default=Comparison.GE)
    threshold = serializers.FloatField(min_value=-1e12, max_value=1e12)
    hold_s = serializers.IntegerField(min_value=0, max_value=7 * 86_400, default=0)
    severity = serializers.ChoiceField(choices=Severity.choices, default=Severity.WARNING)
    scope = serializers.CharField(read_only=True)
    condition = serializers.SerializerMethodField()

    class Meta:
        model = AlertRule
        fields = ["id", "name", "team", "scope", "instance", "host", "gpu_model", "metric", "comparison",
                  "threshold", "hold_s", "severity", "enabled", "default", "condition", "created_at", "updated_at"]
        read_only_fields = ["default", "created_at", "updated_at"]

    def get_condition(self, rule) -> str:
        return describe(rule.metric, rule.comparison, rule.threshold, rule.hold_s)


class AlertRuleUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=80, validators=[no_control_characters], required=False)
    metric = serializers.ChoiceField(choices=[(m, spec.label) for m, spec in METRICS.items()], required=False)
    comparison = serializers.ChoiceField(choices=Comparison.choices, required=False)
    threshold = serializers.FloatField(min_value=-1e12, max_value=1e12, required=False)
    hold_s = serializers.IntegerField(min_value=0, max_value=7 * 86_400, required=False)
    severity = serializers.ChoiceField(choices=Severity.choices, required=False)
    enabled = serializers.BooleanField(required=False)


class NotificationChannelSerializer(serializers.ModelSerializer):
    team = TeamField(required=False, allow_null=True, default=None, help_text="empty: the operators' channel")
    name = serializers.CharField(max_length=80, validators=[plain_name])
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    target = serializers.CharField(max_length=500, help_text="URL (webhook, Slack) or comma-separated emails")
    min_severity = serializers.ChoiceField(choices=Severity.choices, default=Severity.INFO)

    class Meta:
        model = NotificationChannel
        fields = ["id", "team", "name", "kind", "target", "min_severity", "enabled", "created_at"]
        read_only_fields = ["created_at"]


class NewNotificationChannelSerializer(NotificationChannelSerializer):
    secret = serializers.CharField(read_only=True, help_text="The webhook's HMAC key: shown once, at creation.")

    class Meta(NotificationChannelSerializer.Meta):
        fields = [*NotificationChannelSerializer.Meta.fields, "secret"]


class NotificationChannelUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=80, validators=[plain_name], required=False)
    target = serializers.CharField(max_length=500, required=False)
    min_severity = serializers.ChoiceField(choices=Severity.choices, required=False)
    enabled = serializers.BooleanField(required=False)
    rotate_secret = serializers.BooleanField(required=False, help_text="webhooks: a new secret, in the answer")


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = ["id", "notification", "time", "attempt", "ok", "status_code", "error", "duration_ms"]
        read_only_fields = fields


class SilenceSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Silence
        fields = ["id", "team", "rule", "key", "reason", "starts_at", "ends_at", "created_by"]
        read_only_fields = fields


class SilenceRequestSerializer(serializers.Serializer):
    ends_at = serializers.DateTimeField(help_text="ISO 8601; within 30 days")
    reason = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
