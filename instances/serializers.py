from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count, Max
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.models import Team
from console.validators import plain_name

from . import catalog
from .images import parse_reference
from .models import (
    LAUNCHABLE,
    Gpu,
    GpuModel,
    GpuSlice,
    Host,
    HostKind,
    HostState,
    Image,
    Instance,
    LifecycleEvent,
    PreemptionNotice,
    PricingModel,
    Region,
    SliceProfile,
)
from .placement import MAX_GPUS_PER_INSTANCE, largest_pool
from .transitions import is_stuck, state_note


def plain_name_or_blank(value: str) -> None:
    if value:
        plain_name(value)


class CostListSerializer(serializers.ListSerializer):
    """Costs of a page of instances in a few queries, not a few per instance."""

    def to_representation(self, data):
        items = list(data.all() if hasattr(data, "all") else data)
        self.child._costs = catalog.instance_costs(items, now=timezone.now())
        return super().to_representation(items)


class CostFields(serializers.Serializer):
    """``price_per_hour`` (null: not billed now), ``cost_month_to_date`` (metered, up to
    ``cost_as_of``), ``cost_so_far`` (this month up to the response: billing's figure,
    the metered part plus the price per hour since ``cost_since``), ``stuck`` (stopping
    or pending past its grace) and ``state_note`` (why a pending or stopping instance
    holds GPUs without running, in words)."""

    price_per_hour = serializers.SerializerMethodField()
    cost_month_to_date = serializers.SerializerMethodField()
    cost_as_of = serializers.SerializerMethodField()
    cost_so_far = serializers.SerializerMethodField()
    cost_since = serializers.SerializerMethodField()
    stuck = serializers.SerializerMethodField()
    state_note = serializers.SerializerMethodField()

    def _cost(self, obj):
        costs = getattr(self, "_costs", None)
        if costs is None or obj.pk not in costs:
            costs = self._costs = {**(costs or {}), **catalog.instance_costs([obj], now=timezone.now())}
        return costs.get(obj.pk)

    @extend_schema_field(serializers.DecimalField(max_digits=16, decimal_places=6, allow_null=True))
    def get_price_per_hour(self, obj) -> str | None:
        cost = self._cost(obj)
        return None if cost is None or cost.price_per_hour is None else str(cost.price_per_hour)

    @extend_schema_field(serializers.DecimalField(max_digits=16, decimal_places=2, allow_null=True))
    def get_cost_month_to_date(self, obj) -> str | None:
        cost = self._cost(obj)
        return None if cost is None else str(cost.month_to_date)

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_cost_as_of(self, obj):
        cost = self._cost(obj)
        return None if cost is None or cost.as_of is None else cost.as_of.isoformat()

    @extend_schema_field(serializers.DecimalField(max_digits=16, decimal_places=2, allow_null=True))
    def get_cost_so_far(self, obj) -> str | None:
        cost = self._cost(obj)
        return None if cost is None or cost.so_far is None else str(cost.so_far)

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_cost_since(self, obj):
        cost = self._cost(obj)
        return None if cost is None or cost.since is None else cost.since.isoformat()

    def get_stuck(self, obj) -> bool:
        return is_stuck(obj)

    def get_state_note(self, obj) -> str:
        return state_note(obj)


class RegionSerializer(serializers.ModelSerializer):
    class Meta:
        model = Region
        fields = ["id", "name", "display_name"]


class GpuModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["id", "name", "memory_gb", "power_limit_w", "architecture"]


class SliceProfileSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = SliceProfile
        fields = ["id", "gpu_model", "kind", "name", "memory_gb", "slices_per_gpu", "sku"]


class GpuSliceSerializer(serializers.ModelSerializer):
    profile = serializers.CharField(source="profile.name", read_only=True)
    kind = serializers.CharField(source="profile.kind", read_only=True)
    instance = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)

    class Meta:
        model = GpuSlice
        fields = ["uuid", "kind", "profile", "gpu_instance_id", "instance"]


class GpuSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    model = serializers.SlugRelatedField(slug_field="name", read_only=True)
    instance = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    team = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    slices = GpuSliceSerializer(many=True, read_only=True)
    job = serializers.CharField(read_only=True, allow_null=True, default=None, help_text="the job whose run holds it")

    class Meta:
        model = Gpu
        fields = ["uuid", "host", "index", "model", "memory_total", "pci_bus_id", "nvlink_group", "instance", "team",
                  "job", "slices"]


class HostSerializer(serializers.ModelSerializer):
    name = serializers.CharField(max_length=63, validators=[plain_name])
    region = serializers.SlugRelatedField(slug_field="name", queryset=Region.objects.all())
    kind = serializers.ChoiceField(choices=HostKind.choices, default=HostKind.PASSTHROUGH)
    state = serializers.ChoiceField(choices=HostState.choices, required=False)
    nvlink_group = serializers.CharField(max_length=40, required=False, allow_blank=True, validators=[plain_name])
    gpu_count = serializers.IntegerField(read_only=True)
    gpus_free = serializers.IntegerField(read_only=True)
    gpus_failed = serializers.IntegerField(read_only=True)
    gpus_degraded = serializers.IntegerField(read_only=True)
    gpus_cordoned = serializers.IntegerField(read_only=True)
    health = serializers.SerializerMethodField()

    class Meta:
        model = Host
        fields = ["id", "name", "region", "kind", "state", "nvlink_group", "gpu_count", "gpus_free", "health",
                  "gpus_failed", "gpus_degraded", "gpus_cordoned", "cordoned_at", "cordon_reason", "created_at"]
        read_only_fields = ["created_at", "cordoned_at", "cordon_reason"]

    def get_health(self, host) -> str:
        """The worst verdict of its GPUs; why in words: /api/v1/hosts/{id}/health/."""
        if getattr(host, "gpus_failed", 0):
            return "failed"
        return "degraded" if getattr(host, "gpus_degraded", 0) else "healthy"

    def validate_name(self, value):
        taken = Host.objects.filter(name=value)
        if self.instance is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise serializers.ValidationError("A host with this name exists.")
        return value


class LifecycleEventSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = LifecycleEvent
        fields = ["time", "from_state", "to_state", "gpu_count", "host", "reason", "by_platform"]


class ImageSummaryField(serializers.PrimaryKeyRelatedField):
    """Written as an image id; read as the image's id, name and registry reference."""

    def use_pk_only_optimization(self):
        return False

    def to_representation(self, value):
        return {"id": value.pk, "name": value.name, "reference": value.reference, "retired": value.retired}

    def get_choices(self, cutoff=None):
        # The browsable API's form lists the images a request may name, keyed by what is
        # written (the id): the read form, a dict, cannot be a key.
        queryset = self.get_queryset()
        if queryset is None:
            return {}
        if cutoff is not None:
            queryset = queryset[:cutoff]
        return {image.pk: self.display_value(image) for image in queryset}


class ImageSerializer(serializers.ModelSerializer):
    gpu_models = serializers.SlugRelatedField(slug_field="name", many=True, queryset=GpuModel.objects.all())
    default_for = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    team = serializers.PrimaryKeyRelatedField(
        queryset=Team.objects.none(), required=False, allow_null=True,
        help_text="The team a private image belongs to; empty (operators only): a public image.")
    name = serializers.CharField(max_length=63, validators=[plain_name])
    framework = serializers.CharField(max_length=40, required=False, allow_blank=True, validators=[plain_name_or_blank])
    framework_version = serializers.CharField(max_length=20, required=False, allow_blank=True,
                                              validators=[plain_name_or_blank])
    cuda_version = serializers.RegexField(r"^\d{1,2}\.\d{1,2}(\.\d{1,3})?$", max_length=12, required=False,
                                          allow_blank=True, error_messages={"invalid": "A CUDA version, e.g. 12.6."})
    size_bytes = serializers.IntegerField(min_value=0, max_value=10**13, required=False, allow_null=True)
    reference = serializers.CharField(max_length=512, help_text="registry/repository[:tag][@sha256:digest]")
    retired = serializers.BooleanField(read_only=True)

    class Meta:
        model = Image
        fields = ["id", "name", "framework", "framework_version", "cuda_version", "gpu_models", "size_bytes",
                  "reference", "visibility", "team", "default_for", "retired", "retired_at", "created_at"]
        read_only_fields = ["visibility", "retired_at", "created_at"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["team"].queryset = Team.objects.for_user(request.user)

    def validate_reference(self, value):
        try:
            return str(parse_reference(value))
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None


class DefaultImageRequest(serializers.Serializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())


class OwnTeamAndImageChoices:
    """A serializer's ``team`` and ``image`` offer only the requesting user's teams and
    the images they may launch (``for_user``, the one tenancy mechanism)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["team"].queryset = Team.objects.for_user(request.user)
            self.fields["image"].queryset = Image.objects.for_user(request.user)


class InstanceSerializer(OwnTeamAndImageChoices, CostFields, serializers.ModelSerializer):
    team = serializers.PrimaryKeyRelatedField(queryset=Team.objects.none())
    name = serializers.CharField(max_length=63, validators=[plain_name])
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    slice_profile = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, write_only=True,
        help_text="MIG or vGPU profile name of the GPU model, e.g. 1g.10gb; omit for whole GPUs.",
    )
    slice = SliceProfileSerializer(source="slice_profile", read_only=True, allow_null=True)
    gpu_count = serializers.IntegerField(min_value=1, max_value=MAX_GPUS_PER_INSTANCE)
    pricing_model = serializers.ChoiceField(choices=LAUNCHABLE)
    region = serializers.SlugRelatedField(
        slug_field="name", queryset=Region.objects.all(), required=False, allow_null=True, write_only=True
    )
    host = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    gpus = serializers.SlugRelatedField(slug_field="uuid", many=True, read_only=True)
    labels = serializers.DictField(
        child=serializers.CharField(max_length=255, allow_blank=True), required=False,
        help_text="Up to 20 {key: value} strings (cost centre, project); exported as FOCUS Tags.",
    )
    image = ImageSummaryField(
        queryset=Image.objects.none(), required=False, allow_null=True,
        help_text="Image id (see /api/v1/images/); omitted: the GPU model's default image.",
        error_messages={"does_not_exist": "No such image, or it is private to another team.",
                        "incorrect_type": "An image is named by its id (a number), see /api/v1/images/."},
    )
    max_price = serializers.DecimalField(
        max_digits=14, decimal_places=6, required=False, allow_null=True, coerce_to_string=True,
        help_text="Spot only: the most it pays per GPU-hour; a spot price above it preempts it after the notice.",
    )
    subnet = serializers.IntegerField(
        required=False, allow_null=True, write_only=True,
        help_text="Subnet id (see /api/v1/subnets/) for its private address; omitted: the team's default subnet.",
    )
    security_groups = serializers.ListField(
        child=serializers.IntegerField(), required=False, allow_empty=False, write_only=True,
        help_text="Security group ids (see /api/v1/security-groups/); omitted: the team's default group.",
    )
    private_address = serializers.CharField(source="interface.address", read_only=True, default=None, allow_null=True)

    class Meta:
        model = Instance
        fields = [
            "id", "team", "name", "gpu_model", "slice_profile", "slice", "gpu_count", "pricing_model", "region",
            "image", "max_price", "subnet", "security_groups", "private_address",
            "state", "host", "gpus", "labels", "created_at", "state_changed_at", "price_per_hour", "cost_month_to_date",
            "cost_as_of", "cost_so_far", "cost_since", "stuck", "state_note",
        ]
        read_only_fields = ["state", "created_at", "state_changed_at"]
        list_serializer_class = CostListSerializer

    def validate(self, attrs):
        name = attrs.get("slice_profile") or None
        attrs["slice_profile"] = None
        if name:
            profile = SliceProfile.objects.filter(gpu_model=attrs["gpu_model"], name=name).first()
            if profile is None:
                raise serializers.ValidationError(
                    {"slice_profile": f"{attrs['gpu_model'].name} has no slice profile named {name!r}."}
                )
            attrs["slice_profile"] = profile
        model, count = attrs["gpu_model"], attrs["gpu_count"]
        per_host = model.gpus.values("host").order_by().annotate(n=Count("id")).aggregate(m=Max("n"))["m"] or 0
        if per_host == 0:
            raise serializers.ValidationError({"gpu_model": f"The fleet has no {model.name} GPUs."})
        if attrs["slice_profile"] is not None:
            per_host *= attrs["slice_profile"].slices_per_gpu
        if count > per_host:
            raise serializers.ValidationError(
                {"gpu_count": f"At most {per_host} fit on one host of {model.name}; you asked for {count}."}
            )
        if attrs["slice_profile"] is None:
            most, by_groups = largest_pool(model)
            if by_groups and count > most:
                raise serializers.ValidationError({"gpu_count": (
                    f"At most {most} {model.name} GPUs share one NVLink group, and an instance's GPUs must; "
                    f"you asked for {count}.")})
        return attrs


class InstanceDetailSerializer(InstanceSerializer):
    events = LifecycleEventSerializer(many=True, read_only=True)

    class Meta(InstanceSerializer.Meta):
        fields = InstanceSerializer.Meta.fields + ["events"]


class PreemptionNoticeSerializer(serializers.ModelSerializer):
    instance = serializers.PrimaryKeyRelatedField(queryset=Instance.objects.all())
    notice_seconds = serializers.IntegerField(write_only=True, required=False, default=120, min_value=0, max_value=3600)
    instance_name = serializers.CharField(source="instance.name", read_only=True)
    status = serializers.CharField(read_only=True, help_text="pending, done (preempted), moot (ended before) or failed")

    class Meta:
        model = PreemptionNotice
        fields = ["id", "instance", "instance_name", "team", "notice_at", "preempt_at", "reason", "status",
                  "notice_seconds", "done_at"]
        read_only_fields = ["team", "notice_at", "preempt_at", "status", "done_at"]


class LaunchQuoteQuery(serializers.Serializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    slice_profile = serializers.CharField(required=False, allow_blank=True, help_text="profile name, e.g. 1g.10gb")
    pricing_model = serializers.ChoiceField(choices=PricingModel.choices, default=PricingModel.ON_DEMAND)
    gpu_count = serializers.IntegerField(min_value=1, max_value=MAX_GPUS_PER_INSTANCE, default=1)
    team = serializers.IntegerField(required=False, min_value=1)

    def validate(self, attrs):
        name = attrs.get("slice_profile") or None
        attrs["slice_profile"] = None
        if name:
            profile = SliceProfile.objects.filter(gpu_model=attrs["gpu_model"], name=name).first()
            if profile is None:
                raise serializers.ValidationError(
                    {"slice_profile": f"{attrs['gpu_model'].name} has no slice profile named {name!r}."})
            attrs["slice_profile"] = profile
        return attrs
