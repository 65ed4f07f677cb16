"""What the savings advice keeps: recommendations a team set aside, and idle-stop policies
with the notices they give before a stop. Recommendations themselves are computed from
telemetry and prices when asked, never stored (they would be stale by the next minute)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from console.tenancy import TeamScopedQuerySet


class Kind(models.TextChoices):
    STOP = "stop", "Stop: idle"
    SLICE = "slice", "Smaller MIG/vGPU slice"
    FEWER = "fewer", "Fewer GPUs"
    MODEL = "model", "Cheaper GPU model"


class Dismissal(models.Model):
    """A recommendation set aside: for good (``until`` None) or snoozed until a time."""

    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+")
    instance = models.ForeignKey("instances.Instance", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    until = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance", "kind"], name="one_dismissal_per_advice")]

    def __str__(self) -> str:
        return f"{self.instance_id}/{self.kind}"

    def in_force(self, now) -> bool:
        return self.until is None or self.until > now


class IdleStopPolicy(models.Model):
    """Stop a team's running instances (or one instance) after ``idle_minutes`` with every
    GPU idle by real activity; a notice ``warn_minutes`` before. Off unless a team adds one."""

    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+")
    instance = models.ForeignKey("instances.Instance", null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="+", help_text="empty: every instance of the team")
    idle_minutes = models.PositiveIntegerField()
    warn_minutes = models.PositiveIntegerField(default=10)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "instance"], name="one_idle_policy_per_target")]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.instance_id or '*'} after {self.idle_minutes} min"


class NoticeStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    STOPPED = "stopped", "Stopped"
    CANCELLED = "cancelled", "Cancelled: active again"


class IdleStopNotice(models.Model):
    """The warning given before an idle stop, and what came of it."""

    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+")
    instance = models.ForeignKey("instances.Instance", on_delete=models.CASCADE, related_name="+")
    policy = models.ForeignKey(IdleStopPolicy, null=True, on_delete=models.SET_NULL, related_name="notices")
    idle_since = models.DateTimeField()
    warned_at = models.DateTimeField()
    stop_at = models.DateTimeField()
    status = models.CharField(max_length=10, choices=NoticeStatus.choices, default=NoticeStatus.PENDING)
    done_at = models.DateTimeField(null=True, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    def __str__(self) -> str:
        return f"{self.instance_id} stop at {self.stop_at:%H:%M} ({self.status})"


class RegionFootprint(models.Model):
    """What a region's energy costs the climate, set by operators: the data centre's PUE
    (facility energy ÷ IT energy) and the grid's carbon intensity."""

    region = models.OneToOneField("instances.Region", on_delete=models.CASCADE, related_name="+")
    pue = models.DecimalField(max_digits=4, decimal_places=2)
    grid_g_co2e_per_kwh = models.DecimalField(max_digits=6, decimal_places=1)
    updated_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.region_id}: PUE {self.pue}, {self.grid_g_co2e_per_kwh} g/kWh"
