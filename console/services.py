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

from audit.models import Outcome
from audit.recording import record_event

from . import twofactor
from .live import end_user_sockets
from .models import ApiToken, Invitation, Membership, Role, Scope, Team, UserSession, hash_secret
from .tenancy import AUDIT_ROLES, is_operator


@transaction.atomic
def create_team(*, actor, name: str) -> Team:
    team = Team.objects.create(name=name, slug=slugify(name)[:80] or "team")
    record_event(actor=actor, action="team.create", target=team, team=team, details={"name": name})
    return team


@transaction.atomic
def add_member(*, actor, team: Team, user: User, role: str = Role.MEMBER) -> Membership:
    """A membership grants more than the member's credentials were made for: their other
    sessions and live sockets end (they sign in again, with the second factor the new
    role may need), and their API tokens keep the teams they had reached until now."""
    pinned, revoked = _keep_token_teams(user)
    membership = Membership.objects.create(team=team, user=user, role=role)
    ended = _end_sessions_of(user, actor)
    record_event(
        actor=actor, action="member.add", target=membership, team=team,
        details={
            "user": user.username, "role": role, "signed_out": ended,
            # API token prefixes ("token" in a key would be redacted as a secret)
            "api_kept_to_their_teams": pinned, "api_revoked": revoked,
        },
    )
    if user != actor:
        end_user_sockets(user.pk)
    return membership


def _keep_token_teams(user: User) -> tuple[list[str], list[str]]:
    """Limit the user's live tokens that reach every team of theirs to the teams they
    belong to now, so that a membership added later does not widen them; a token of a
    user with no team yet is revoked. Returns the prefixes (limited, revoked)."""
    if user.is_staff:  # an operator's token reaches every team anyway
        return [], []
    current = list(Team.objects.filter(memberships__user=user))
    pinned, revoked = [], []
    for token in ApiToken.objects.live().filter(user=user, teams__isnull=True):
        if current:
            token.teams.set(current)
            pinned.append(token.prefix)
        else:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            revoked.append(token.prefix)
    return pinned, revoked


@transaction.atomic
def change_role(*, actor, membership: Membership, role: str) -> Membership:
    """A role taken away takes effect at once: the member's sessions and live sockets end
    (they sign in again with what they now hold)."""
    before = membership.role
    if before == role:
        return membership
    _keep_an_admin(membership, leaving=before == Role.ADMIN)
    membership.role = role
    membership.save(update_fields=["role"])
    ended = _end_sessions_of(membership.user, actor)
    record_event(
        actor=actor,
        action="member.change_role",
        target=membership,
        team=membership.team_id,
        details={"user": membership.user.username, "from": before, "to": role, "signed_out": ended},
    )
    end_user_sockets(membership.user_id)  # its live subscriptions were checked against the old role
    return membership


@transaction.atomic
def remove_member(*, actor, membership: Membership) -> None:
    """The member leaves the team at once: their sessions and live sockets end, and their
    API tokens lose the team (a token limited to it alone is revoked)."""
    _keep_an_admin(membership, leaving=membership.role == Role.ADMIN)
    user, team = membership.user, membership.team
    revoked = []
    for token in ApiToken.objects.live().filter(user=user, teams=team).prefetch_related("teams"):
        if len(token.teams.all()) == 1:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            revoked.append(token.prefix)
        else:
            token.teams.remove(team)
    ended = _end_sessions_of(user, actor)
    record_event(
        actor=actor,
        action="member.remove",
        target=membership,
        team=membership.team_id,
        details={"user": user.username, "role": membership.role, "revoked_tokens": revoked, "signed_out": ended},
    )
    end_user_sockets(membership.user_id)
    membership.delete()


def _keep_an_admin(membership: Membership, *, leaving: bool) -> None:
    if leaving and not Membership.objects.filter(team_id=membership.team_id, role=Role.ADMIN).exclude(pk=membership.pk).exists():
        raise ValidationError({"role": "A team keeps at least one admin: make someone else admin first."})


def _end_sessions_of(user: User, actor) -> int:
    from .sessions import end_sessions

    # An admin changing their own role keeps the session they are using. The live
    # sockets are ended by the caller, for everyone.
    return 0 if user == actor else end_sessions(user, sockets=False)


# --- invitations ------------------------------------------------------------------


class InvitationRefused(Exception):
    """An invitation link that cannot be used (unknown, used, cancelled or expired)."""

    status = 410


class InvitationNotYours(InvitationRefused):
    """An invitation opened by an account of another address, or a sign-up for an
    address that already has an account."""

    status = 403


@transaction.atomic
def invite_member(*, actor, team: Team, email: str, role: str, accept_url) -> tuple[Invitation, str]:
    """A one-time link for ``email``, mailed once the transaction commits;
    ``accept_url(raw)`` makes the absolute link. Returns the invitation and the raw key."""
    from django.core.mail import send_mail

    raw = Invitation.generate()
    invitation = Invitation.objects.create(
        team=team, email=email, role=role, key_hash=hash_secret(raw),
        invited_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    record_event(
        actor=actor, action="member.invite", target=invitation, team=team,
        details={"email": email, "role": role, "expires_at": invitation.expires_at.isoformat()},
    )
    link = accept_url(raw)
    inviter = getattr(actor, "username", "An admin")
    body = (
        f"{inviter} invites you to the team {team.name} on GPU Console as {role}.\n\n"
        f"Open this link to join (it works once, until {invitation.expires_at:%Y-%m-%d %H:%M} UTC):\n{link}\n"
    )
    transaction.on_commit(lambda: send_mail(f"Join {team.name} on GPU Console", body, None, [email]))
    return invitation, raw


def find_invitation(raw: str) -> Invitation:
    """The usable invitation for ``raw``; InvitationRefused says why not."""
    invitation = (
        Invitation.objects.select_related("team", "invited_by").filter(key_hash=hash_secret(raw[:200])).first()
    )
    if invitation is None:
        raise InvitationRefused("This invitation link is not valid.")
    if invitation.accepted_at is not None:
        raise InvitationRefused("This invitation link was already used.")
    if invitation.cancelled_at is not None:
        raise InvitationRefused("This invitation was cancelled.")
    if invitation.expires_at <= timezone.now():
        raise InvitationRefused(f"This invitation expired at {invitation.expires_at:%Y-%m-%d %H:%M} UTC; ask for a new one.")
    return invitation


def same_address(a: str, b: str) -> bool:
    return bool(a) and a.strip().casefold() == b.strip().casefold()


def accept_invitation(*, raw: str, user: User) -> Membership:
    """Join with the link: only the account of the invited address may (its email is the
    one it signed up with from an invitation, or that the identity provider verified);
    anyone else is refused, and that is audited."""
    invitation = find_invitation(raw)
    if not same_address(user.email, invitation.email):
        record_event(
            actor=user, action="member.accept_invite", target=invitation, team=invitation.team,
            outcome=Outcome.DENIED, details={"user": user.username, "reason": "another address"},
        )
        raise InvitationNotYours(
            "This invitation was sent to another email address: open it signed in as that address's account "
            "(or signed out, to make the account)."
        )
    return _accept(invitation, user)


@transaction.atomic
def _accept(invitation: Invitation, user: User) -> Membership:
    invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    if invitation.accepted_at is not None:  # a second tab won the race
        raise InvitationRefused("This invitation link was already used.")
    existing = Membership.objects.filter(team=invitation.team, user=user).first()
    if existing is not None:
        raise InvitationRefused(f"You are already in {invitation.team.name} (as {existing.role}).")
    invitation.accepted_at, invitation.accepted_by = timezone.now(), user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    record_event(
        actor=user, action="member.accept_invite", target=invitation, team=invitation.team,
        details={"email": invitation.email, "user": user.username, "role": invitation.role},
    )
    return add_member(actor=user, team=invitation.team, user=user, role=invitation.role)


@transaction.atomic
def cancel_invitation(*, actor, invitation: Invitation) -> Invitation:
    invitation.cancelled_at = timezone.now()
    invitation.save(update_fields=["cancelled_at"])
    record_event(
        actor=actor, action="member.cancel_invite", target=invitation, team=invitation.team_id,
        details={"email": invitation.email, "role": invitation.role},
    )
    return invitation


@transaction.atomic
def sign_up(*, username: str, email: str, password: str) -> User:
    """A new account from an invitation link (the password passed the validators), for
    an address that has none yet."""
    if User.objects.filter(email__iexact=email.strip()).exists():
        raise InvitationNotYours("An account with this email address exists: sign in with it, then open the link again.")
    user = User.objects.create_user(username=username, email=email, password=password)
    record_event(actor=user, action="auth.sign_up", target=user, details={"username": username, "email": email})
    return user


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
    if not twofactor.satisfied(token.user, second_factor=token.second_factor):
        raise TokenRefused(
            "This API token was made without a second factor, which your role now requires: "
            "make a new one with your two-factor code (POST /api/v1/auth/token/ with otp, or the tokens page)."
        )
    team_ids = [t.pk for t in token.teams.all()]
    if team_ids:
        token.user.token_team_ids = team_ids  # read by console.tenancy: the token's teams only
    return token


def scopes_for(user: User) -> list[str]:
    """The scopes ``user``'s tokens may hold: ``audit:export`` only for team admins,
    auditors and operators. The token form offers these and no others."""
    may_audit = is_operator(user) or Membership.objects.filter(user=user, role__in=AUDIT_ROLES).exists()
    return [scope for scope in Scope.values if scope != Scope.AUDIT_EXPORT or may_audit]


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
    elif Scope.AUDIT_EXPORT in scopes and Scope.AUDIT_EXPORT not in scopes_for(user):
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
    expires_at: datetime | None = None, parent: ApiToken | None = None, second_factor: bool = False,
) -> tuple[ApiToken, str]:
    """Returns the token row and the raw key, which is never stored and shown once.
    ``second_factor``: the request that asks for it passed one (a token made with a
    token inherits that token's)."""
    scopes, teams, expires_at = check_token_request(
        user=user, scopes=scopes, teams=teams, expires_at=expires_at, parent=parent
    )
    raw = ApiToken.generate()
    if parent is not None:
        second_factor = parent.second_factor
    token = ApiToken.objects.create(
        user=user, name=name, key_hash=hash_secret(raw), prefix=raw[:10], scopes=scopes, expires_at=expires_at,
        second_factor=second_factor,
    )
    token.teams.set(teams)
    record_event(
        actor=actor, action="api_token.create", target=token,
        details={
            "name": name, "prefix": token.prefix, "scopes": scopes, "teams": [t.name for t in teams],
            "expires_at": expires_at.isoformat(), "second_factor": second_factor,
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


@transaction.atomic
def change_password(*, actor, user: User, password: str, request=None) -> int:
    """Set a new password; every other session of the user ends (and its live sockets).
    With ``request``, its own session stays signed in. Returns how many ended."""
    from django.contrib.auth import update_session_auth_hash

    from .sessions import end_sessions

    user.set_password(password)
    user.save(update_fields=["password"])
    keep = request.session.session_key if request is not None else None
    ended = end_sessions(user, keep=keep)
    if request is not None:
        update_session_auth_hash(request, user)  # a new session key for this one
        UserSession.objects.filter(session_key=keep).update(session_key=request.session.session_key)
    record_event(actor=actor, action="auth.password_change", target=user, details={"signed_out": ended})
    return ended


@transaction.atomic
def sign_out_everywhere(*, actor, user: User) -> int:
    from .sessions import end_sessions

    ended = end_sessions(user)
    record_event(actor=actor, action="auth.sessions_ended", target=user, details={"signed_out": ended})
    return ended


def record_logout(*, user, session_key: str | None = None) -> None:
    """Audits the logout and closes the live sockets of that session (of every session
    of the user when the key is not known)."""
    record_event(actor=user, action="auth.logout", target=user)
    end_user_sockets(user.pk, session_key=session_key)
