"""Teams, memberships and API tokens: the verbs, each audited in its own transaction."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from audit.services import record_event

from .live import end_user_sockets
from .models import ApiToken, Membership, Role, Scope, Team, hash_secret
from .tenancy import AUDIT_ROLES, is_operator


@transaction.atomic
def create_team(*, actor, name: str) -> Team:
    team = Team.objects.create(name=name, slug=slugify(name)[:80] or "team")
    record_event(actor=actor, action="team.create", target=team, team=team, details={"name": name})
    return team


@transaction.atomic
def add_member(*, actor, team: Team, user: User, role: str = Role.MEMBER) -> Membership:
    membership = Membership.objects.create(team=team, user=user, role=role)
    record_event(
        actor=actor, action="member.add", target=membership, team=team, details={"user": user.username, "role": role}
    )
    return membership


@transaction.atomic
def change_role(*, actor, membership: Membership, role: str) -> Membership:
    before = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    record_event(
        actor=actor,
        action="member.change_role",
        target=membership,
        team=membership.team_id,
        details={"user": membership.user.username, "from": before, "to": role},
    )
    end_user_sockets(membership.user_id)  # its live subscriptions were checked against the old role
    return membership


@transaction.atomic
def remove_member(*, actor, membership: Membership) -> None:
    record_event(
        actor=actor,
        action="member.remove",
        target=membership,
        team=membership.team_id,
        details={"user": membership.user.username, "role": membership.role},
    )
    end_user_sockets(membership.user_id)
    membership.delete()


class TokenRefused(Exception):
    """An API token that does not authenticate (answers 401); the message says why."""


def authenticate_api_token(raw: str, *, source_ip: str | None = None) -> ApiToken:
    """The one check of a presented API token: known, not revoked, not expired, its user
    active. Notes the time and address of use (at most once a minute per address)."""
    token = ApiToken.objects.select_related("user").filter(key_hash=hash_secret(raw)).first() if len(raw) <= 200 else None
    if token is None or not token.user.is_active:
        raise TokenRefused("Invalid or revoked API token.")
    if token.revoked_at is not None:
        raise TokenRefused("This API token was revoked.")
    now = timezone.now()
    if token.expires_at <= now:
        raise TokenRefused(f"This API token expired at {token.expires_at:%Y-%m-%d %H:%M} UTC.")
    stale = token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1)
    if stale or token.last_used_ip != source_ip:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_ip=source_ip)
        token.last_used_at, token.last_used_ip = now, source_ip
    team_ids = [t.pk for t in token.teams.all()]
    if team_ids:
        token.user.token_team_ids = team_ids  # read by console.tenancy: the token's teams only
    return token


def check_token_request(
    *, user: User, scopes: Iterable[str], teams: Iterable[Team] = (), expires_at: datetime | None = None,
    parent: ApiToken | None = None,
) -> tuple[list[str], list[Team], datetime]:
    """What a new token may be: known scopes, ``audit:export`` only for those who may
    audit, the user's own teams, an expiry within ``API_TOKEN_MAX_DAYS``; a token made
    with a token gets no more than that one has. Raises ValidationError naming the field."""
    now = timezone.now()
    scopes = list(dict.fromkeys(scopes))
    teams = list(dict.fromkeys(teams))
    errors = {}
    unknown = [scope for scope in scopes if scope not in Scope.values]
    if not scopes or unknown:
        errors["scopes"] = f"Choose one or more of: {', '.join(Scope.values)}."
    elif Scope.AUDIT_EXPORT in scopes and not (
        is_operator(user) or Membership.objects.filter(user=user, role__in=AUDIT_ROLES).exists()
    ):
        errors["scopes"] = "Only team admins, auditors and operators may hold the audit:export scope."
    mine = set(Team.objects.for_user(user).values_list("pk", flat=True))
    if any(team.pk not in mine for team in teams):
        errors["teams"] = "A token can be limited only to teams you belong to."
    latest = now + timedelta(days=settings.API_TOKEN_MAX_DAYS)
    if expires_at is None:
        expires_at = now + timedelta(days=settings.API_TOKEN_DEFAULT_DAYS)
    elif expires_at <= now:
        errors["expires_at"] = "The expiry must be in the future."
    elif expires_at > latest:
        errors["expires_at"] = f"A token may live {settings.API_TOKEN_MAX_DAYS} days at most (until {latest:%Y-%m-%d})."
    if parent is not None and not errors:
        parent_teams = {t.pk for t in parent.teams.all()}
        if not set(scopes) <= set(parent.scopes):
            errors["scopes"] = f"This token may only make tokens with its own scopes: {', '.join(parent.scopes)}."
        elif parent_teams and not (teams and {t.pk for t in teams} <= parent_teams):
            errors["teams"] = "This token may only make tokens limited to its own teams."
        expires_at = min(expires_at, parent.expires_at)
    if errors:
        raise ValidationError(errors)
    return scopes, teams, expires_at


@transaction.atomic
def create_api_token(
    *, actor, user: User, name: str, scopes: Iterable[str] = (Scope.READ, Scope.WRITE), teams: Iterable[Team] = (),
    expires_at: datetime | None = None, parent: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """Returns the token row and the raw key, which is never stored and shown once."""
    scopes, teams, expires_at = check_token_request(
        user=user, scopes=scopes, teams=teams, expires_at=expires_at, parent=parent
    )
    raw = ApiToken.generate()
    token = ApiToken.objects.create(
        user=user, name=name, key_hash=hash_secret(raw), prefix=raw[:10], scopes=scopes, expires_at=expires_at
    )
    token.teams.set(teams)
    record_event(
        actor=actor, action="api_token.create", target=token,
        details={
            "name": name, "prefix": token.prefix, "scopes": scopes, "teams": [t.name for t in teams],
            "expires_at": expires_at.isoformat(),
        },
    )
    return token, raw


@transaction.atomic
def revoke_api_token(*, actor, token: ApiToken) -> ApiToken:
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    record_event(actor=actor, action="api_token.revoke", target=token, details={"name": token.name, "prefix": token.prefix})
    return token


def record_login(*, user, success: bool, username: str = "", via: str = "page") -> None:
    if success:
        record_event(actor=user, action="auth.login", target=user, details={"via": via})
    else:
        record_event(
            actor=AnonymousUser() if user is None else user,
            action="auth.login_failed",
            # The account it tried, if there is one, so its team's admins see the attempt.
            target=user or User.objects.filter(username=username[:150]).first(),
            outcome="failure",
            details={"username": username[:150], "via": via},
        )


def record_logout(*, user, session_key: str | None = None) -> None:
    """Audits the logout and closes the live sockets of that session (of every session
    of the user when the key is not known)."""
    record_event(actor=user, action="auth.logout", target=user)
    end_user_sockets(user.pk, session_key=session_key)
