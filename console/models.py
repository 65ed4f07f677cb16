import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from .tenancy import TeamScopedQuerySet
from .validators import plain_name


class Team(models.Model):
    name = models.CharField(max_length=80, unique=True, validators=[plain_name])
    slug = models.SlugField(max_length=80, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    ADMIN = "admin", "Admin"
    AUDITOR = "auditor", "Auditor"


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


TOKEN_PREFIX = "gpc_"


def hash_secret(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class Scope(models.TextChoices):
    READ = "read", "read: GET, HEAD and OPTIONS"
    WRITE = "write", "write: create, change, delete"
    AUDIT_EXPORT = "audit:export", "audit:export: stream the audit log"


def default_token_expiry():
    return timezone.now() + timedelta(days=settings.API_TOKEN_DEFAULT_DAYS)


class ApiTokenQuerySet(models.QuerySet):
    def live(self):
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the raw key is shown once.
    It carries ``scopes`` (what it may do), ``teams`` (where; none means every team of
    its user) and an expiry."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=80, validators=[plain_name])
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    scopes = models.JSONField(default=list)
    teams = models.ManyToManyField(Team, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(default=default_token_expiry)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_ip = models.GenericIPAddressField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Made by someone who had passed a second factor (a code, or a token that had).
    second_factor = models.BooleanField(default=False)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @staticmethod
    def generate() -> str:
        return TOKEN_PREFIX + secrets.token_urlsafe(32)

    @property
    def expired(self) -> bool:
        return self.expires_at <= timezone.now()

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expired else "active"


class UserSession(models.Model):
    """A signed-in browser session, so that it can be listed and ended from elsewhere
    (sign-out everywhere, a changed password, a removed role)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="browser_sessions")
    session_key = models.CharField(max_length=40, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=200, blank=True)
    via = models.CharField(max_length=16, default="password")

    class Meta:
        ordering = ["-last_seen_at"]

    def __str__(self) -> str:
        return f"session of {self.user_id} since {self.created_at:%Y-%m-%d %H:%M}"


def default_invite_expiry():
    return timezone.now() + timedelta(days=settings.INVITE_DAYS)


INVITE_PREFIX = "gpi_"


class Invitation(models.Model):
    """A one-time link that makes the holder of ``email`` a member of ``team`` with
    ``role``, until it expires. Only the link's SHA-256 is kept."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    key_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(default=default_invite_expiry)
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    cancelled_at = models.DateTimeField(null=True, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation of {self.email} to {self.team_id} ({self.role})"

    @staticmethod
    def generate() -> str:
        return INVITE_PREFIX + secrets.token_urlsafe(32)

    @property
    def status(self) -> str:
        if self.accepted_at:
            return "accepted"
        if self.cancelled_at:
            return "cancelled"
        return "expired" if self.expires_at <= timezone.now() else "pending"


class ExternalIdentity(models.Model):
    """A user's identity at the single sign-on provider: once linked, the provider's
    ``sub`` finds the user even if their email changes."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)
    last_login_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_external_identity")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
