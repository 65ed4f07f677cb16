"""Teams, memberships and API tokens: the verbs, each audited in its own transaction."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from audit.services import record_event

from .models import ApiToken, Membership, Role, Team, hash_secret


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
    membership.delete()


@transaction.atomic
def create_api_token(*, actor, user: User, name: str) -> tuple[ApiToken, str]:
    """Returns the token row and the raw key, which is never stored and shown once."""
    raw = ApiToken.generate()
    token = ApiToken.objects.create(user=user, name=name, key_hash=hash_secret(raw), prefix=raw[:10])
    record_event(actor=actor, action="api_token.create", target=token, details={"name": name, "prefix": token.prefix})
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
            outcome="failure",
            details={"username": username[:150], "via": via},
        )


def record_logout(*, user) -> None:
    record_event(actor=user, action="auth.logout", target=user)
