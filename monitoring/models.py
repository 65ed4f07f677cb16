"""Telemetry: host agent tokens and sessions, raw samples, rollups, latest state,
GPU events (alerts are the alerting app's)."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from console.models import hash_secret
from console.tenancy import TeamScopedQuerySet

from .catalog import (
    COUNTERS,
    FLOAT_METRICS,
    GAUGES,
    RAW_METRICS,
    STATES,
    UNSIGNED_64,
    to_signed,
    to_unsigned,
)

HOST_TOKEN_PREFIX = "gph_"


class Unsigned64Field(models.BigIntegerField):
    """0 … 2**64-1 in a signed 64-bit column (two's complement), read back unsigned."""

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return None if value is None else to_signed(int(value))

    def from_db_value(self, value, expression, connection):
        return None if value is None else to_unsigned(int(value))


# --- agents -------------------------------------------------------------------------


def default_host_token_expiry():
    return timezone.now() + timedelta(days=settings.HOST_TOKEN_DAYS)


class HostTokenQuerySet(models.QuerySet):
    def live(self):
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())


class HostToken(models.Model):
    """An agent's credential for one host. Only its SHA-256 is kept; the raw token is
    shown once, when it is created."""

    host = models.ForeignKey("instances.Host", on_delete=models.CASCADE, related_name="agent_tokens")
    name = models.CharField(max_length=80, blank=True)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(default=default_host_token_expiry)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The token that replaced this one; both work until this one's expiry.
    replaced_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = HostTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.host_id})"

    @staticmethod
    def generate() -> str:
        return HOST_TOKEN_PREFIX + secrets.token_urlsafe(32)

    @staticmethod
    def hash(raw: str) -> str:
        return hash_secret(raw)

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "rotating" if self.replaced_by_id else "active"


class AgentState(models.Model):
    """What the server knows about a host's agent: connection, counters, last word."""

    host = models.OneToOneField("instances.Host", on_delete=models.CASCADE, related_name="agent")
    connected = models.BooleanField(default=False)
    connected_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    boot_id = models.CharField(max_length=32, blank=True)
    agent = models.CharField(max_length=80, blank=True)
    backend = models.CharField(max_length=20, blank=True)
    frames = models.BigIntegerField(default=0)
    samples = models.BigIntegerField(default=0)
    duplicates = models.BigIntegerField(default=0)
    bad_frames = models.BigIntegerField(default=0)
    last_error = models.CharField(max_length=300, blank=True)

    def __str__(self) -> str:
        return f"agent of {self.host_id}"


class AgentSession(models.Model):
    """Dedupe state of one agent boot: samples up to ``last_seq`` are stored."""

    host = models.ForeignKey("instances.Host", on_delete=models.CASCADE, related_name="agent_sessions")
    boot_id = models.CharField(max_length=32)
    last_seq = models.BigIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "boot_id"], name="one_session_per_boot")]

    def __str__(self) -> str:
        return f"{self.host_id}/{self.boot_id}@{self.last_seq}"


# --- samples and rollups ------------------------------------------------------------


def _raw_field(name: str):
    if name in UNSIGNED_64:
        return Unsigned64Field(null=True, blank=True)
    if name in FLOAT_METRICS:
        return models.FloatField(null=True, blank=True)
    return models.BigIntegerField(null=True, blank=True)


class _Attributed(models.Model):
    """A GPU (or a MIG/vGPU slice of it) and who held it then."""

    gpu = models.ForeignKey("instances.Gpu", on_delete=models.CASCADE, related_name="+")
    slice = models.ForeignKey("instances.GpuSlice", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    instance = models.ForeignKey(
        "instances.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        abstract = True


class Sample(_Attributed):
    """One reading of one GPU or slice. A metric the GPU does not report is NULL."""

    time = models.DateTimeField()
    procs = models.JSONField(null=True, blank=True)
    # Lookups by GPU or instance use the (gpu, time) and (instance, time) indexes, so
    # these keys have no index of their own: two fewer in every day partition.
    gpu = models.ForeignKey("instances.Gpu", on_delete=models.CASCADE, related_name="+", db_index=False)
    instance = models.ForeignKey(
        "instances.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    class Meta:
        indexes = [
            models.Index(fields=["gpu", "time"], name="sample_gpu_time"),
            models.Index(fields=["instance", "time"], name="sample_instance_time"),
            models.Index(fields=["time"], name="sample_time"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_id}@{self.time:%H:%M:%S}"


for _name in RAW_METRICS:
    Sample.add_to_class(_name, _raw_field(_name))


class _Rollup(_Attributed):
    bucket = models.DateTimeField()
    samples = models.PositiveIntegerField(default=0)
    observed_s = models.FloatField(default=0, help_text="seconds of the bucket covered by samples")

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.gpu_id}@{self.bucket:%Y-%m-%d %H:%M}"


def _add_rollup_fields(model) -> None:
    for name in GAUGES:
        for stat in ("min", "avg", "max"):
            model.add_to_class(f"{name}_{stat}", models.FloatField(null=True, blank=True))
    for name in COUNTERS:
        model.add_to_class(f"{name}_delta", models.FloatField(null=True, blank=True))
        model.add_to_class(f"{name}_last", Unsigned64Field(null=True, blank=True))
    for name in STATES:
        model.add_to_class(f"{name}_max", Unsigned64Field(null=True, blank=True))


class Rollup1m(_Rollup):
    # As for samples: the (gpu, bucket) and (instance, bucket) indexes serve these keys.
    gpu = models.ForeignKey("instances.Gpu", on_delete=models.CASCADE, related_name="+", db_index=False)
    instance = models.ForeignKey(
        "instances.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    class Meta:
        indexes = [
            models.Index(fields=["gpu", "bucket"], name="rollup1m_gpu_bucket"),
            models.Index(fields=["instance", "bucket"], name="rollup1m_instance_bucket"),
            models.Index(fields=["bucket"], name="rollup1m_bucket"),
        ]


class Rollup1h(_Rollup):
    # Seconds of the hour in minutes with a reading of real activity, and of those the
    # idle ones (below activity.IDLE_BELOW_PCT), summed from its 1-minute rollups; NULL
    # where the hour had none. Kept here so idle cost over a month reads hours, not
    # minutes, and stays the same once the minutes are past retention.
    judged_s = models.FloatField(null=True, blank=True)
    idle_s = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["gpu", "bucket"], name="rollup1h_gpu_bucket"),
            models.Index(fields=["instance", "bucket"], name="rollup1h_instance_bucket"),
            models.Index(fields=["bucket"], name="rollup1h_bucket"),
        ]


_add_rollup_fields(Rollup1m)
_add_rollup_fields(Rollup1h)


class RollupCursor(models.Model):
    """How far a periodic task has got: every bucket before ``done_until`` is built."""

    name = models.CharField(max_length=40, primary_key=True)
    done_until = models.DateTimeField(null=True, blank=True)
    # Set when late samples land before done_until: rebuild from here on the next run.
    dirty_from = models.DateTimeField(null=True, blank=True)
    # The 1-hour tier only: its buckets from here to done_until (or dirty_from) were
    # built with ``idle_s`` summed from their minutes.
    idle_from = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} until {self.done_until}"


class GpuLatest(_Attributed):
    """The latest reading of each GPU and slice, for live views and /metrics."""

    uuid = models.CharField(max_length=80, unique=True)
    host = models.ForeignKey("instances.Host", on_delete=models.CASCADE, related_name="+")
    time = models.DateTimeField()
    last_seen = models.DateTimeField()
    metrics = models.JSONField(default=dict)

    class Meta:
        ordering = ["host_id", "gpu_id", "slice_id"]

    def __str__(self) -> str:
        return f"{self.uuid}@{self.time:%H:%M:%S}"

    def is_stale(self, now=None, after_s: float | None = None) -> bool:
        after_s = after_s if after_s is not None else stale_after_s()
        return ((now or timezone.now()) - self.last_seen).total_seconds() > after_s


def stale_after_s() -> float:
    return float(getattr(settings, "TELEMETRY_STALE_AFTER_S", 15))


# --- events ----------------------------------------------------------------------


class EventKind(models.TextChoices):
    XID = "xid", "XID error"
    GPU_LOST = "gpu_lost", "GPU lost"
    GPU_BACK = "gpu_back", "GPU back"
    ECC = "ecc_uncorrected", "Uncorrected ECC errors"
    REGISTERED = "registered", "GPU registered"
    MOVED = "moved", "GPU reported by another host"
    VANISHED = "vanished", "GPU missing from its host's report"


class GpuEvent(models.Model):
    time = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=20, choices=EventKind.choices)
    host = models.ForeignKey("instances.Host", on_delete=models.CASCADE, related_name="+")
    gpu = models.ForeignKey("instances.Gpu", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    uuid = models.CharField(max_length=80)
    code = models.BigIntegerField(null=True, blank=True, help_text="XID number")
    message = models.CharField(max_length=1024, blank=True)
    instance = models.ForeignKey(
        "instances.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    details = models.JSONField(default=dict, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["gpu", "time"], name="gpuevent_gpu_time")]

    def __str__(self) -> str:
        return f"{self.kind} {self.uuid} at {self.time:%Y-%m-%d %H:%M:%S}"


# --- host health and diagnostics (docs/operations.md) ---------------------------------


class GpuHealth(models.Model):
    """A GPU's health: the facts its agent last sent and the verdict judged from them
    (monitoring/health.py). Operators only: no team, never shown to tenants."""

    gpu = models.OneToOneField("instances.Gpu", on_delete=models.CASCADE, related_name="health")
    facts = models.JSONField(default=dict, blank=True)
    facts_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, default="healthy")
    reasons = models.JSONField(default=list, blank=True)
    # Since when a hardware clock-event reason has been held (judged on each evaluation).
    throttled_since = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(default=timezone.now)  # of its state
    evaluated_at = models.DateTimeField(null=True, blank=True)  # when the verdict was last written

    def __str__(self) -> str:
        return f"{self.gpu_id} {self.state}"

    @property
    def summary(self) -> str:
        return "; ".join(r["text"] for r in self.reasons) or "healthy"


class BundleState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    STORED = "stored", "Stored"
    FAILED = "failed", "Failed"


class DiagnosticsBundle(models.Model):
    """One diagnostics bundle of a host, collected by its agent on an operator's request.
    Operators only: no team, never shown to tenants."""

    host = models.ForeignKey("instances.Host", on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=10, choices=BundleState.choices, default=BundleState.REQUESTED)
    requested_at = models.DateTimeField(default=timezone.now)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The agent uploads with its host token and this one-time key (sent in the request frame).
    upload_key_hash = models.CharField(max_length=64)
    stored_at = models.DateTimeField(null=True, blank=True)
    file = models.CharField(max_length=255, blank=True, help_text="name in the diagnostics storage")
    size = models.BigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    manifest = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"diagnostics of {self.host_id} at {self.requested_at:%Y-%m-%d %H:%M:%S} ({self.state})"
