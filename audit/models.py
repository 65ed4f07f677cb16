from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast
from django.utils import timezone

from console.events import Outcome  # noqa: F401  (the field choices; callers import it from here)
from console.models import Membership
from console.tenancy import AUDIT_ROLES, TeamScopedQuerySet, team_ids

from . import chain
from .chain import GENESIS_HASH  # noqa: F401  (re-exported: callers import it from here)


class ActorType(models.TextChoices):
    USER = "user", "User"
    AGENT = "agent", "Agent"
    SYSTEM = "system", "System"
    ANONYMOUS = "anonymous", "Anonymous"


class AuditEventQuerySet(TeamScopedQuerySet):
    def for_user(self, user, roles=AUDIT_ROLES, *, operators: bool = True):
        """Team admins and auditors see their teams' events, operators all of them,
        everyone their own team-less rows (their logins, their tokens), and admins and
        auditors the sign-ins, failed sign-ins and refusals of their teams' members."""
        scoped = super().for_user(user, roles, operators=operators)
        if not (user and user.is_authenticated and user.is_active) or (operators and user.is_staff):
            return scoped
        own = self.filter(team__isnull=True, actor_type=ActorType.USER, actor_id=str(user.pk))
        members = (
            Membership.objects.filter(team_id__in=team_ids(user, roles))
            .annotate(uid=Cast("user_id", models.CharField()))
            .values("uid")
        )
        access = Q(action__startswith="auth.") | Q(action__endswith=".denied")
        theirs = self.filter(access, team__isnull=True).filter(
            Q(actor_type=ActorType.USER, actor_id__in=members)
            | Q(target_type="auth.user", target_id__in=members)
        )
        return scoped | own | theirs


class CanonicalJSONField(models.JSONField):
    """Details stored as their canonical JSON text (sorted keys, no spaces, UTF-8), the
    very bytes the chain hashes. On PostgreSQL the column is ``json``, which keeps text
    byte for byte (``jsonb`` would reorder keys), so verification and exports use the
    stored text as it is instead of re-encoding a million objects."""

    def db_type(self, connection):
        return "json" if connection.vendor == "postgresql" else super().db_type(connection)

    def get_db_prep_value(self, value, connection, prepared=False):
        if value is None:
            return None
        return chain.canonical_details(value)

    def from_db_value(self, value, expression, connection):
        if value is None or not isinstance(value, str):
            return value  # psycopg has already parsed a ``json`` column
        return super().from_db_value(value, expression, connection)


class AuditEvent(models.Model):
    """One append-only, hash-chained record. Written whole by ``record_event``; its place
    in the log (``seq``, ``prev_hash``, ``hash``) is given once, by whoever holds the chain
    head, either at once or moments after the writer commits (a *pending* record has
    none yet). Never otherwise updated or deleted by the app (on PostgreSQL, triggers
    refuse it); only retention removes rows past their age."""

    seq = models.BigIntegerField(unique=True, null=True, blank=True)
    time = models.DateTimeField(default=timezone.now, db_index=True)
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    actor_id = models.CharField(max_length=64, blank=True)
    actor_name = models.CharField(max_length=150, blank=True)
    # The actor's role in the event's team when it happened ("operator" for staff).
    actor_role = models.CharField(max_length=32, blank=True, default="")
    team = models.ForeignKey(
        "console.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    # The target's name as it was when the event was written (names change, ids stay).
    target_name = models.CharField(max_length=150, blank=True, default="")
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.SUCCESS)
    source_ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=400, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    details = CanonicalJSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    hash = models.CharField(max_length=64, blank=True, default="")

    objects = AuditEventQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["seq"]
        indexes = [
            models.Index(fields=["team", "time"]),
            models.Index(fields=["actor_name", "time"]),
            models.Index(fields=["target_type", "target_id"], name="audit_event_target_idx"),
            # The pending records, which the next sealer takes in id order.
            models.Index(fields=["id"], condition=Q(seq__isnull=True), name="audit_event_pending_idx"),
        ]

    def __str__(self) -> str:
        if self.seq is None:
            return f"pending {self.action} by {self.actor_name or self.actor_type} ({self.outcome})"
        return f"#{self.seq} {self.action} by {self.actor_name or self.actor_type} ({self.outcome})"


class ChainHead(models.Model):
    """The last sealed record. Whoever holds this row's lock seals records (gives them
    their place in the chain); writers that find it held leave theirs pending."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, default=GENESIS_HASH)

    def __str__(self) -> str:
        return f"head #{self.seq}"


class Checkpoint(models.Model):
    """A signed tree head: "the log held ``seq`` events, their Merkle root was ``root`` and
    event #seq's chain hash was ``hash``, at ``time``", signed with Ed25519 by the key
    whose fingerprint is ``key_id``. The private key lives outside the database, so
    rewriting events and checkpoints together still fails verification. ``frontier``
    holds the roots of the perfect subtrees that tile the tree (its compact range): the
    next head extends it, and it stays useful after retention retires old events."""

    seq = models.BigIntegerField(unique=True)
    hash = models.CharField(max_length=64)
    root = models.CharField(max_length=64)
    frontier = models.JSONField(default=list)
    time = models.DateTimeField()
    key_id = models.CharField(max_length=64)
    signature = models.CharField(max_length=100)

    class Meta:
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"tree head #{self.seq}"

    @property
    def size(self) -> int:
        return self.seq

    def frontier_bytes(self) -> list[bytes]:
        return [bytes.fromhex(h) for h in self.frontier]

    def as_dict(self) -> dict:
        """The signed tree head as exports and the API carry it."""
        return {
            "tree_size": self.seq, "root": self.root, "chain_hash": self.hash,
            "time": chain.iso_time(self.time), "key_fingerprint": self.key_id,
            "signature": self.signature,
        }  # fmt: skip


class SigningKey(models.Model):
    """A public key that signs (or signed) tree heads. The private half never enters the
    database; a key is retired (``valid_until``) when the next one is first used."""

    fingerprint = models.CharField(max_length=64, unique=True)
    public_pem = models.TextField()
    valid_from = models.DateTimeField()
    valid_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["valid_from"]

    def __str__(self) -> str:
        return f"key {self.fingerprint[:16]}"


class Verification(models.Model):
    """The result of one walk over the chain, shown on the audit page."""

    started_at = models.DateTimeField(default=timezone.now)
    actor_name = models.CharField(max_length=150)
    valid = models.BooleanField()
    checked = models.BigIntegerField()
    first_seq = models.BigIntegerField(null=True)
    last_seq = models.BigIntegerField(null=True)
    first_broken_seq = models.BigIntegerField(null=True)
    reason = models.CharField(max_length=300, blank=True)
    seconds = models.FloatField()
    segments = models.JSONField(default=list)

    class Meta:
        ordering = ["-started_at", "-id"]
        get_latest_by = "started_at"

    def __str__(self) -> str:
        return f"{'valid' if self.valid else 'INVALID'} ({self.checked} events)"


class RefusalTally(models.Model):
    """Anonymous refusals (a bad agent token, a locked-out sign-in) counted per action,
    source address and minute. A working counter outside the chain: ``flush_refusals``
    turns each finished minute into one audit event carrying the count, so a flood of
    refusals costs one chained row per source per minute instead of one each."""

    minute = models.DateTimeField()
    action = models.CharField(max_length=64)
    source_ip = models.CharField(max_length=45, blank=True, default="")
    count = models.PositiveIntegerField(default=0)
    user_agent = models.CharField(max_length=400, blank=True, default="")  # the minute's first refusal's
    details = models.JSONField(default=dict)  # the minute's first refusal's

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["minute", "action", "source_ip"], name="refusal_tally_once_per_minute")
        ]

    def __str__(self) -> str:
        return f"{self.action} from {self.source_ip or '?'} at {self.minute:%H:%M}: {self.count}"
