
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.api.fields import BoundedDateTimeField
from console.models import Team
from console.validators import parse_month
from instances.models import GpuModel

from . import pricing
from .models import (
    Budget,
    BudgetAlert,
    Invoice,
    InvoiceLine,
    Price,
    PriceKind,
    Reservation,
    SpotPrice,
    Term,
    UnratedUsage,
)

MONEY = {"max_digits": 16, "decimal_places": 2, "coerce_to_string": True}
RATE = {"max_digits": 14, "decimal_places": 6, "coerce_to_string": True}


class TeamField(serializers.PrimaryKeyRelatedField):
    """A team the requesting user can see (another team's id reads as absent)."""

    def get_queryset(self):
        request = self.context.get("request")
        return Team.objects.for_user(request.user) if request else Team.objects.none()


class PriceSerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=PriceKind.choices, default=PriceKind.ON_DEMAND)
    hourly = serializers.DecimalField(min_value=0, **RATE)
    effective_until = BoundedDateTimeField(required=False, allow_null=True)

    class Meta:
        model = Price
        fields = ["id", "sku", "kind", "hourly", "effective_from", "effective_until", "created_at"]
        read_only_fields = ["created_at"]


class SpotPriceSerializer(serializers.ModelSerializer):
    hourly = serializers.DecimalField(min_value=0, **RATE)

    class Meta:
        model = SpotPrice
        fields = ["id", "sku", "hourly", "time", "source"]
        read_only_fields = ["time", "source"]


class ReservationSerializer(serializers.ModelSerializer):
    team = TeamField()
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    gpu_count = serializers.IntegerField(min_value=1, max_value=100_000)
    term = serializers.ChoiceField(choices=Term.choices)
    hourly = serializers.DecimalField(read_only=True, **RATE)
    code = serializers.CharField(read_only=True)
    status = serializers.SerializerMethodField()

    class Meta:
        model = Reservation
        fields = ["id", "code", "team", "gpu_model", "gpu_count", "term", "start", "end", "hourly", "status", "created_at"]
        read_only_fields = ["end", "created_at"]

    def get_status(self, obj) -> str:
        return obj.status()


@extend_schema_field({"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$", "example": "2026-12"})
class MonthField(serializers.Field):
    """A calendar month as YYYY-MM (or its first day, YYYY-MM-01)."""

    def to_internal_value(self, data):
        try:
            return parse_month(data)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None

    def to_representation(self, value):
        return f"{value:%Y-%m}"


class BudgetSerializer(serializers.ModelSerializer):
    team = TeamField()
    month = MonthField()
    amount = serializers.DecimalField(**MONEY)
    currency = serializers.CharField(max_length=3, required=False)
    actual_thresholds = serializers.ListField(child=serializers.IntegerField(), required=False)
    forecast_thresholds = serializers.ListField(child=serializers.IntegerField(), required=False)
    recurring = serializers.BooleanField(required=False, default=False,
                                         help_text="carried into each next month (same amount and thresholds)")

    class Meta:
        model = Budget
        fields = ["id", "team", "month", "amount", "currency", "actual_thresholds", "forecast_thresholds", "recurring",
                  "created_at"]
        read_only_fields = ["created_at"]
        validators = []  # one budget a team and month: the service says so, as on the page


class BudgetUpdateSerializer(serializers.Serializer):
    amount = serializers.DecimalField(required=False, **MONEY)
    currency = serializers.CharField(max_length=3, required=False)
    actual_thresholds = serializers.ListField(child=serializers.IntegerField(), required=False)
    forecast_thresholds = serializers.ListField(child=serializers.IntegerField(), required=False)
    recurring = serializers.BooleanField(required=False)


class BudgetAlertSerializer(serializers.ModelSerializer):
    spend = serializers.DecimalField(**MONEY)

    class Meta:
        model = BudgetAlert
        fields = ["id", "team", "budget", "basis", "percent", "spend", "crossed_at"]


class InvoiceLineSerializer(serializers.ModelSerializer):
    amount = serializers.DecimalField(**MONEY)
    unit_price = serializers.DecimalField(allow_null=True, **RATE)
    quantity = serializers.DecimalField(max_digits=18, decimal_places=4, coerce_to_string=True, allow_null=True)
    refers_to = serializers.SlugRelatedField(slug_field="number", read_only=True, allow_null=True)

    class Meta:
        model = InvoiceLine
        fields = ["position", "kind", "description", "sku", "pricing_category", "instance", "reservation",
                  "refers_to", "quantity", "unit", "unit_price", "amount"]


class InvoiceSerializer(serializers.ModelSerializer):
    team_name = serializers.CharField(source="team.name", read_only=True)
    status = serializers.CharField(read_only=True, help_text="draft (follows usage) or issued (never changes)")
    month = MonthField(read_only=True)
    subtotal = serializers.DecimalField(read_only=True, **MONEY)
    adjustments = serializers.DecimalField(read_only=True, **MONEY)
    total = serializers.DecimalField(read_only=True, **MONEY)

    class Meta:
        model = Invoice
        fields = ["id", "number", "team", "team_name", "month", "period_start", "period_end", "status", "currency",
                  "subtotal", "adjustments", "total", "memo", "issued_at", "updated_at"]
        read_only_fields = [f for f in fields if f != "memo"]


class InvoiceDetailSerializer(InvoiceSerializer):
    lines = InvoiceLineSerializer(many=True, read_only=True)

    class Meta(InvoiceSerializer.Meta):
        fields = InvoiceSerializer.Meta.fields + ["lines"]


class InvoiceMemoSerializer(serializers.Serializer):
    memo = serializers.CharField(allow_blank=True, help_text="at most 200 characters")


class AdjustmentSerializer(serializers.Serializer):
    amount = serializers.DecimalField(max_digits=16, decimal_places=2, coerce_to_string=True)
    reason = serializers.CharField(max_length=200)


class CostQuerySerializer(serializers.Serializer):
    group_by = serializers.ChoiceField(
        choices=["day", "instance", "model", "pricing_category", "team", "scaling_group", "job"], default="day"
    )
    start = serializers.CharField(required=False, help_text="YYYY-MM-DD or ISO 8601 datetime (UTC); default: month start")
    end = serializers.CharField(required=False, help_text="exclusive; default: start of the next month")
    team = serializers.IntegerField(required=False, min_value=1)


class CostRowSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()
    billed_cost = serializers.DecimalField(**MONEY)
    list_cost = serializers.DecimalField(**MONEY)
    gpu_hours = serializers.DecimalField(max_digits=18, decimal_places=4, coerce_to_string=True)


class CostReportSerializer(serializers.Serializer):
    currency = serializers.CharField()
    start = BoundedDateTimeField()
    end = BoundedDateTimeField()
    group_by = serializers.CharField()
    total = serializers.DecimalField(**MONEY)
    rows = CostRowSerializer(many=True)


class ExportQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=["csv", "focus"], default="focus")
    start = serializers.CharField(required=False)
    end = serializers.CharField(required=False)
    team = serializers.IntegerField(required=False, min_value=1)


class UnratedUsageSerializer(serializers.ModelSerializer):
    instance_name = serializers.CharField(source="instance.name", read_only=True)
    gpu_hours = serializers.SerializerMethodField()

    class Meta:
        model = UnratedUsage
        fields = ["id", "team", "instance", "instance_name", "sku", "pricing_model", "period_start", "start", "end",
                  "gpus", "gpu_hours", "reason", "found_at"]

    def get_gpu_hours(self, row) -> str:
        return str(pricing.hours(row.gpu_seconds))
