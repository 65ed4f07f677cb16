from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.models import Team
from console.validators import plain_name
from instances.models import LAUNCHABLE, GpuModel, Image, PricingModel
from instances.serializers import ImageSummaryField, OwnTeamAndImageChoices

from .models import MetricSource, ScalingDecision, ScalingGroup


class GroupCostSerializer(serializers.Serializer):
    month_to_date = serializers.DecimalField(max_digits=16, decimal_places=2)
    per_hour = serializers.DecimalField(max_digits=16, decimal_places=6)
    currency = serializers.CharField()


class ScalingGroupSerializer(OwnTeamAndImageChoices, serializers.ModelSerializer):
    """Ranges and relations between fields (min ≤ max, a max price only for spot) are
    checked by scaling.services.check_settings, one place for the API and the pages."""

    team = serializers.PrimaryKeyRelatedField(queryset=Team.objects.none())
    name = serializers.CharField(max_length=48, validators=[plain_name])
    gpu_model = serializers.SlugRelatedField(
        slug_field="name", queryset=GpuModel.objects.all(),
        error_messages={"does_not_exist": "Unknown GPU model {value}: see GET /api/v1/gpu-models/."},
    )
    gpus_per_instance = serializers.IntegerField()
    image = ImageSummaryField(
        queryset=Image.objects.none(), required=False, allow_null=True,
        help_text="Image id (see /api/v1/images/) every instance boots; empty: the GPU model's default image.",
        error_messages={"does_not_exist": "No such image, or it is private to another team.",
                        "incorrect_type": "An image is named by its id (a number), see /api/v1/images/."},
    )
    pricing_model = serializers.ChoiceField(choices=LAUNCHABLE, default=PricingModel.ON_DEMAND)
    max_price = serializers.DecimalField(max_digits=12, decimal_places=6, required=False, allow_null=True,
                                         help_text="spot only: the most paid per GPU-hour, else on-demand")
    min_instances = serializers.IntegerField(default=1)
    max_instances = serializers.IntegerField()
    target_per_instance = serializers.IntegerField(help_text="queued items one instance should work through")
    scale_out_cooldown_s = serializers.IntegerField(default=120)
    scale_in_cooldown_s = serializers.IntegerField(default=300)
    metric_source = serializers.ChoiceField(choices=MetricSource.choices, default=MetricSource.PUSHED)
    subnet = serializers.IntegerField(
        required=False, allow_null=True, write_only=True,
        help_text="Subnet id (see /api/v1/subnets/) for each instance's private address; null: the team's default.",
    )
    security_groups = serializers.ListField(
        child=serializers.IntegerField(), required=False, allow_empty=True, write_only=True,
        help_text="Security group ids (see /api/v1/security-groups/) of each instance; empty: the team's default group.",
    )
    network = serializers.JSONField(read_only=True, help_text='{"subnet": id or null, "security_groups": [ids]}')
    running = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField()

    class Meta:
        model = ScalingGroup
        fields = [
            "id", "team", "name", "gpu_model", "gpus_per_instance", "image", "pricing_model", "max_price", "min_instances",
            "max_instances", "target_per_instance", "scale_out_cooldown_s", "scale_in_cooldown_s", "metric_source",
            "subnet", "security_groups", "network", "queue_depth", "queue_depth_at", "running", "last_scale_out_at", "last_scale_in_at", "cost", "created_at",
        ]
        read_only_fields = ["queue_depth", "queue_depth_at", "last_scale_out_at", "last_scale_in_at", "created_at"]
        validators = []  # a taken name is refused by services.create_group, with its name

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance is not None and not isinstance(self.instance, list | tuple) and not hasattr(self.instance, "all"):
            self.fields["team"].read_only = True
            self.fields["name"].read_only = True

    def get_running(self, obj) -> int:
        from .services import active_instances

        running = getattr(obj, "running_count", None)  # annotated on lists (services.with_running)
        return active_instances(obj).count() if running is None else running

    @extend_schema_field(GroupCostSerializer)
    def get_cost(self, obj):
        from django.utils import timezone

        from .costs import group_cost

        cost = self.context.get("costs", {}).get(obj.pk)  # a page's costs, read at once
        return GroupCostSerializer(cost or group_cost(obj, now=timezone.now())).data


class QueueDepthSerializer(serializers.Serializer):
    queue_depth = serializers.IntegerField(help_text="queued items now, a whole number 0 … 10⁹")


class ScalingDecisionSerializer(serializers.ModelSerializer):
    class Meta:
        model = ScalingDecision
        fields = ["time", "queue_depth", "desired", "running", "action", "changed", "reason", "message"]
