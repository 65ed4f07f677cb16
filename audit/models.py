from django.db import models
from django.utils import timezone

from console.tenancy import TeamScopedQuerySet


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    DENIED = "denied", "Denied"
    FAILURE = "failure", "Failure"


class ActorType(models.TextChoices):
    USER = "user", "User"
    AGENT = "agent", "Agent"
    SYSTEM = "system", "System"
    ANONYMOUS = "anonymous", "Anonymous"


class AuditEvent(models.Model):
    """One append-only, hash-chained record. Never updated or deleted by the app."""

    seq = models.BigIntegerField(unique=True)
    time = models.DateTimeField(default=timezone.now, db_index=True)
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    actor_id = models.CharField(max_length=64, blank=True)
    actor_name = models.CharField(max_length=150, blank=True)
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.SUCCESS)
    source_ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=400, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    details = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["seq"]
        indexes = [models.Index(fields=["team", "time"]), models.Index(fields=["actor_name", "time"])]

    def __str__(self) -> str:
        return f"#{self.seq} {self.action} by {self.actor_name or self.actor_type} ({self.outcome})"


class ChainHead(models.Model):
    """A single row locked by every append, so concurrent writers keep one chain."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, default="0" * 64)

    def __str__(self) -> str:
        return f"head #{self.seq}"


GENESIS_HASH = "0" * 64
