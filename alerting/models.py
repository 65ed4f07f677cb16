"""Alerts and what decides and routes them: rules, silences, notification channels,
notifications and their delivery log.

The tables were made by the monitoring app and keep its names (``Meta.db_table``)."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

from console.tenancy import TeamScopedQuerySet


class AlertKind(models.TextChoices):
    TEMPERATURE = "temperature", "GPU temperature"
    POWER = "power", "GPU power"
    XID = "xid", "XID error"
    ECC = "ecc_uncorrected", "Uncorrected ECC errors"
    GPU_LOST = "gpu_lost", "GPU lost"
    AGENT_SILENT = "agent_silent", "Agent silent"
    IDLE = "idle", "Idle allocation"
    UTILIZATION = "utilization", "GPU utilization"
    ACTIVITY = "activity", "Real activity"
    TENSOR = "tensor", "Tensor-core activity"
    MEMORY = "memory", "GPU memory"
    THROTTLE = "throttle", "Clock throttling"
    BUDGET = "budget", "Budget"
    PREEMPTION = "preemption", "Spot preemption"
    AUDIT = "audit_verify", "Audit verification"
    UNRATED = "unrated", "Unrated usage"
    SCALING_AT_MAX = "scaling_at_max", "Scaling group at its maximum"
    SPOT_MAX = "spot_max", "Spot price against max price"
    NETWORK_RULES = "network_rules", "Network rules not applied"
    GPU_HEALTH = "gpu_health", "GPU health"


class Category(models.TextChoices):
    TELEMETRY = "telemetry", "Telemetry"
    BUDGET = "budget", "Budget"
    BILLING = "billing", "Billing"
    AUDIT = "audit", "Audit"
    CAPACITY = "capacity", "Capacity"


class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class AlertState(models.TextChoices):
    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    RESOLVED = "resolved", "Resolved"


ACTIVE_STATES = (AlertState.OPEN, AlertState.ACKNOWLEDGED)


class Alert(models.Model):
    """A condition that holds now (open, acknowledged) or held (resolved).

    ``key`` names the condition, e.g. ``temperature:GPU-…``; at most one alert per key
    is active at a time.
    """

    kind = models.CharField(max_length=20, choices=AlertKind.choices)
    category = models.CharField(max_length=12, choices=Category.choices, default=Category.TELEMETRY)
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.WARNING)
    rule = models.ForeignKey("AlertRule", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts")
    state = models.CharField(max_length=16, choices=AlertState.choices, default=AlertState.OPEN)
    key = models.CharField(max_length=160)
    host = models.ForeignKey("instances.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    gpu = models.ForeignKey("instances.Gpu", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    uuid = models.CharField(max_length=80, blank=True)
    instance = models.ForeignKey(
        "instances.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    message = models.CharField(max_length=300)
    value = models.FloatField(null=True, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    count = models.PositiveIntegerField(default=1, help_text="times the condition was seen")
    opened_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        db_table = "monitoring_alert"
        ordering = ["-opened_at", "-id"]
        indexes = [
            models.Index(fields=["key", "state"], name="alert_key_state"),
            models.Index(fields=["team", "state"], name="alert_team_state"),
        ]
        constraints = [
            # Ingest writers race to open the same alert; the database keeps one.
            models.UniqueConstraint(
                fields=["key"], condition=models.Q(state__in=["open", "acknowledged"]), name="one_active_alert_per_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.state}: {self.message}"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


# --- rules, silences, notification channels ------------------------------------------


class Comparison(models.TextChoices):
    GE = ">=", "≥"
    GT = ">", ">"
    LE = "<=", "≤"
    LT = "<", "<"


class AlertRule(models.Model):
    """A condition on a telemetry metric or derived figure that opens an alert when it
    holds for ``hold_s`` seconds.

    A team's rule (``team`` set) watches that team's instances (or one of them); an
    operators' rule (``team`` empty) watches the fleet, one host or one GPU model.
    alerting/rules.py lists the metrics and how each is evaluated.
    """

    name = models.CharField(max_length=80)
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    instance = models.ForeignKey("instances.Instance", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    host = models.ForeignKey("instances.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    gpu_model = models.ForeignKey("instances.GpuModel", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    metric = models.CharField(max_length=24)
    comparison = models.CharField(max_length=2, choices=Comparison.choices, default=Comparison.GE)
    threshold = models.FloatField()
    hold_s = models.PositiveIntegerField(default=0, help_text="seconds the condition must hold")
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.WARNING)
    enabled = models.BooleanField(default=True)
    default = models.BooleanField(default=False, help_text="one of the rules every team starts with")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        db_table = "monitoring_alertrule"
        ordering = ["team_id", "name", "id"]

    def __str__(self) -> str:
        return f"{self.name}: {self.metric} {self.comparison} {self.threshold:g} for {self.hold_s} s"

    @property
    def scope(self) -> str:
        if self.team_id is not None:
            return "instance" if self.instance_id else "team"
        if self.host_id:
            return "host"
        return "gpu_model" if self.gpu_model_id else "fleet"


class Silence(models.Model):
    """No notifications for matching alerts until ``ends_at``; the alerts still show."""

    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    rule = models.ForeignKey(AlertRule, null=True, blank=True, on_delete=models.CASCADE, related_name="silences")
    key = models.CharField(max_length=160, blank=True, help_text="one alert's key; empty: every alert of the rule")
    reason = models.CharField(max_length=200, blank=True)
    starts_at = models.DateTimeField(default=timezone.now)
    ends_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        db_table = "monitoring_silence"
        ordering = ["-ends_at", "-id"]

    def __str__(self) -> str:
        return f"silence {self.key or self.rule_id} until {self.ends_at:%Y-%m-%d %H:%M}"


class ChannelKind(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (signed JSON)"
    SLACK = "slack", "Slack incoming webhook"


class NotificationChannel(models.Model):
    """Where a team's (or, with no team, the operators') alerts are sent."""

    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=80)
    kind = models.CharField(max_length=8, choices=ChannelKind.choices)
    target = models.CharField(max_length=500, help_text="URL, or comma-separated email addresses")
    secret = models.CharField(max_length=64, blank=True, help_text="HMAC key of the webhook signature")
    min_severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.INFO)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        db_table = "monitoring_notificationchannel"
        ordering = ["team_id", "name", "id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    @staticmethod
    def new_secret() -> str:
        return secrets.token_hex(32)


class NotificationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"
    SUPPRESSED = "suppressed", "Silenced"


class Notification(models.Model):
    """One message to one channel about a group of alerts (a rule on one host, a budget),
    sent once ``send_after`` has passed; alerts joining the group meanwhile ride along."""

    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="notifications")
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    group_key = models.CharField(max_length=160)
    alerts = models.ManyToManyField(Alert, related_name="notifications")
    status = models.CharField(max_length=10, choices=NotificationStatus.choices, default=NotificationStatus.PENDING)
    test = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    send_after = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveSmallIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        db_table = "monitoring_notification"
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "send_after"], name="notification_due"),
            models.Index(fields=["channel", "group_key"], name="notification_group"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "group_key"], condition=models.Q(status="pending", test=False),
                name="one_pending_notification_per_group",
            )
        ]

    def __str__(self) -> str:
        return f"{self.group_key} -> {self.channel_id} ({self.status})"


class Delivery(models.Model):
    """One attempt to deliver a notification: the delivery log."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="deliveries")
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    time = models.DateTimeField(default=timezone.now)
    attempt = models.PositiveSmallIntegerField()
    ok = models.BooleanField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        db_table = "monitoring_delivery"
        ordering = ["-time", "-id"]

    def __str__(self) -> str:
        return f"{self.notification_id} #{self.attempt}: {'ok' if self.ok else self.error}"
