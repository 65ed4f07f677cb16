"""Elastic scaling groups: a template of instances, bounds, a target of queued items per
instance, and the record of every decision the periodic task takes. Rows change only
through ``scaling.services``."""

from django.db import models
from django.utils import timezone

from console.tenancy import TeamScopedQuerySet
from console.validators import plain_name
from instances.models import LAUNCHABLE, PricingModel

MONEY = {"max_digits": 12, "decimal_places": 6}


class MetricSource(models.TextChoices):
    PUSHED = "pushed", "Queue depth pushed by the team"
    GPU_UTIL = "gpu_util", "GPU utilization of its instances"


class ScalingGroupQuerySet(TeamScopedQuerySet):
    def live(self):
        """Groups not deleted (a deleted group keeps its row for costs and history)."""
        return self.filter(deleted_at__isnull=True)


class ScalingGroup(models.Model):
    """Instances of one template, kept at clamp(ceil(queue depth / target), min, max)."""

    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="scaling_groups")
    name = models.CharField(max_length=48, validators=[plain_name])
    # The template every instance of the group is launched from.
    gpu_model = models.ForeignKey("instances.GpuModel", on_delete=models.PROTECT, related_name="+")
    gpus_per_instance = models.PositiveSmallIntegerField()
    # Empty: each launch boots the GPU model's default image.
    image = models.ForeignKey("instances.Image", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    pricing_model = models.CharField(max_length=16, choices=LAUNCHABLE, default=PricingModel.ON_DEMAND)
    # Spot only: the most it pays per GPU-hour; above it, launches fall back to on-demand.
    max_price = models.DecimalField(null=True, blank=True, **MONEY)
    min_instances = models.PositiveSmallIntegerField(default=1)
    max_instances = models.PositiveSmallIntegerField()
    target_per_instance = models.PositiveIntegerField(help_text="queued items one instance should work through")
    scale_out_cooldown_s = models.PositiveIntegerField(default=120)
    scale_in_cooldown_s = models.PositiveIntegerField(default=300)
    metric_source = models.CharField(max_length=16, choices=MetricSource.choices, default=MetricSource.PUSHED)
    # Where each instance is attached: {"subnet": id, "security_groups": [ids]}
    # (network.interfaces.check_choice); empty: the team's default subnet and group.
    network = models.JSONField(default=dict, blank=True)
    # The latest pushed queue depth and when it came.
    queue_depth = models.PositiveBigIntegerField(null=True, blank=True)
    queue_depth_at = models.DateTimeField(null=True, blank=True)
    last_scale_out_at = models.DateTimeField(null=True, blank=True)
    last_scale_in_at = models.DateTimeField(null=True, blank=True)
    launched_total = models.PositiveIntegerField(default=0, help_text="numbers the instances' names")
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    # Deleted: its instances were terminated and it is no longer evaluated or listed; the
    # row stays so the cost explorer and the audit log keep naming it.
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = ScalingGroupQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], condition=models.Q(deleted_at__isnull=True),
                                               name="one_scaling_group_name_per_team")]

    def __str__(self) -> str:
        return self.name


class ScalingMember(models.Model):
    """An instance the group launched: the link billing's cost explorer groups by."""

    group = models.ForeignKey(ScalingGroup, on_delete=models.PROTECT, related_name="members")
    instance = models.OneToOneField("instances.Instance", on_delete=models.CASCADE, related_name="scaling_member")
    joined_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="group__team")

    class Meta:
        ordering = ["-joined_at", "-id"]

    def __str__(self) -> str:
        return f"{self.instance_id} in {self.group_id}"


class Action(models.TextChoices):
    NONE = "none", "No change"
    SCALE_OUT = "scale_out", "Scale out"
    SCALE_IN = "scale_in", "Scale in"


class Reason(models.TextChoices):
    QUEUE = "queue_depth", "Queue depth"
    AT_MAX = "at_max", "At max bound"
    AT_MIN = "at_min", "At min bound"
    COOLDOWN = "cooldown", "Cooldown"
    NO_CAPACITY = "no_capacity", "No capacity"
    NO_METRIC = "no_metric", "No fresh queue depth"
    REFUSED = "refused", "Launch refused"


class ScalingDecision(models.Model):
    """One evaluation of a group: what it saw, what it wanted, what it did and why.
    ``running`` counts the group's instances holding GPUs and not stopping after the
    decision (ones still starting included)."""

    group = models.ForeignKey(ScalingGroup, on_delete=models.CASCADE, related_name="decisions")
    time = models.DateTimeField()
    queue_depth = models.PositiveBigIntegerField(null=True, blank=True)
    desired = models.PositiveSmallIntegerField()
    running = models.PositiveSmallIntegerField()
    action = models.CharField(max_length=12, choices=Action.choices, default=Action.NONE)
    changed = models.PositiveSmallIntegerField(default=0, help_text="instances launched or stopped")
    reason = models.CharField(max_length=16, choices=Reason.choices)
    message = models.CharField(max_length=300, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="group__team")

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["group", "time"], name="scaling_decision_group_time")]

    def __str__(self) -> str:
        return f"{self.group_id} {self.time:%Y-%m-%d %H:%M:%S} {self.action} ({self.reason})"
