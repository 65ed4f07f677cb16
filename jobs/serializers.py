from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import currency
from console.api.fields import BoundedDateTimeField
from console.models import Team
from console.validators import no_control_characters, plain_name
from instances.models import GpuModel, Image
from instances.serializers import ImageSummaryField, OwnTeamAndImageChoices

from . import queue_status
from .models import MAX_COMMAND_CHARS, Job, JobEvent, JobRun, Priority


class QueueListSerializer(serializers.ListSerializer):
    """Queue positions and costs of a page of jobs in a few queries, not per job."""

    def to_representation(self, data):
        items = list(data.all() if hasattr(data, "all") else data)
        self.child._info = queue_status.queue_info(items, timezone.now())
        return super().to_representation(items)


class JobSerializer(OwnTeamAndImageChoices, serializers.ModelSerializer):
    team = serializers.PrimaryKeyRelatedField(queryset=Team.objects.none())
    name = serializers.CharField(max_length=63, validators=[plain_name])
    command = serializers.CharField(max_length=MAX_COMMAND_CHARS, trim_whitespace=False)
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    image = ImageSummaryField(
        queryset=Image.objects.none(), required=False, allow_null=True,
        help_text="Image id (see /api/v1/images/); omitted: the GPU model's default image.",
        error_messages={"does_not_exist": "No such image, or it is private to another team.",
                        "incorrect_type": "An image is named by its id (a number), see /api/v1/images/."},
    )
    gpu_count = serializers.IntegerField(min_value=1, max_value=10_000)
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.LOW)
    deadline = BoundedDateTimeField(required=False, allow_null=True,
                                         help_text="A job still queued at its deadline is not started.")
    subnet = serializers.IntegerField(
        required=False, allow_null=True, write_only=True,
        help_text="Subnet id (see /api/v1/subnets/) for each run's private address; omitted: the team's default.",
    )
    security_groups = serializers.ListField(
        child=serializers.IntegerField(), required=False, allow_empty=False, write_only=True,
        help_text="Security group ids (see /api/v1/security-groups/) of each run; omitted: the team's default group.",
    )
    network = serializers.JSONField(read_only=True, help_text='{"subnet": id or null, "security_groups": [ids]}')
    instance = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    position = serializers.SerializerMethodField()
    waiting_seconds = serializers.SerializerMethodField()
    why_waiting = serializers.SerializerMethodField()
    cost_so_far = serializers.SerializerMethodField()
    price_per_hour = serializers.SerializerMethodField()
    currency = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "code", "team", "name", "image", "command", "gpu_model", "gpu_count", "priority", "deadline", "subnet",
            "security_groups", "network", "state", "submitted_at", "waiting_since", "preempted_at", "ended_at",
            "instance", "position", "waiting_seconds", "why_waiting", "cost_so_far", "price_per_hour", "currency",
        ]
        read_only_fields = ["state", "submitted_at", "waiting_since", "preempted_at", "ended_at"]
        list_serializer_class = QueueListSerializer

    def validate_command(self, value):
        no_control_characters(value.replace("\n", " ").replace("\t", " "))
        return value

    def _queue(self, obj) -> queue_status.QueueInfo:
        info = getattr(self, "_info", None)
        if info is None or obj.pk not in info:
            info = self._info = {**(info or {}), **queue_status.queue_info([obj])}
        return info[obj.pk]

    def get_position(self, obj) -> int | None:
        return self._queue(obj).position

    def get_waiting_seconds(self, obj) -> int | None:
        return self._queue(obj).waiting_seconds

    def get_why_waiting(self, obj) -> str:
        return self._queue(obj).reason

    @extend_schema_field(serializers.DecimalField(max_digits=16, decimal_places=2))
    def get_cost_so_far(self, obj) -> str:
        return str(self._queue(obj).cost)

    @extend_schema_field(serializers.DecimalField(max_digits=16, decimal_places=6, allow_null=True))
    def get_price_per_hour(self, obj) -> str | None:
        price = self._queue(obj).price_per_hour
        return None if price is None else str(price)

    def get_currency(self, obj) -> str:
        return currency()


class JobRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobRun
        fields = ["instance", "started_at", "ended_at", "end_reason"]


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["time", "kind", "reason", "instance"]


class JobDetailSerializer(JobSerializer):
    runs = JobRunSerializer(many=True, read_only=True)
    events = JobEventSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "runs", "events"]
