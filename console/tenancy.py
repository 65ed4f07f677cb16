"""The one tenancy mechanism: every team-owned queryset is narrowed by ``for_user``.

A model opts in with ``objects = TeamScopedQuerySet.as_manager(team_path="team")``,
where ``team_path`` is the lookup from the model to its Team ("" for Team itself).
Operators (staff) see every team; everyone else sees the teams they belong to,
optionally only those where they hold one of ``roles``. Another team's object is
simply absent, so detail views answer 404. A request made with an API token limited
to some teams (``user.token_team_ids``, set by the token check) sees only those.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.apps import apps
from django.db import models

READ_ROLES = ("member", "admin", "auditor")
WRITE_ROLES = ("member", "admin")
ADMIN_ROLES = ("admin",)
AUDIT_ROLES = ("admin", "auditor")


def is_operator(user) -> bool:
    """Staff acting for the whole fleet. A request made with an API token limited to some
    teams is not, even a staff member's: it reaches those teams' objects through
    ``for_user`` and nothing fleet-wide (hosts, prices, /metrics of other teams)."""
    return bool(user and user.is_authenticated and user.is_active and user.is_staff and token_teams(user) is None)


def _memberships():
    # console.models builds its querysets from this module, so the model comes from the registry.
    return apps.get_model("console", "Membership").objects


def team_ids(user, roles: Iterable[str] = READ_ROLES):
    """A subquery of the ids of the teams where ``user`` holds one of ``roles``."""
    found = _memberships().filter(user_id=user.pk, role__in=list(roles))
    limit = token_teams(user)
    if limit is not None:
        found = found.filter(team_id__in=limit)
    return found.values("team_id")


def token_teams(user) -> list[int] | None:
    """The teams the request's API token is limited to, or None for no limit."""
    return getattr(user, "token_team_ids", None)


def has_role(user, team_id: int, roles: Iterable[str]) -> bool:
    if not (user and user.is_authenticated):
        return False
    limit = token_teams(user)
    if limit is not None and team_id not in limit:
        return False
    return _memberships().filter(user_id=user.pk, team_id=team_id, role__in=list(roles)).exists()


class TeamScopedQuerySet(models.QuerySet):
    team_path = "team"

    @classmethod
    def as_manager(cls, team_path: str = "team"):
        scoped = type(cls.__name__, (cls,), {"team_path": team_path, "__module__": cls.__module__})
        manager = models.Manager.from_queryset(scoped)()
        return manager

    def for_user(self, user, roles: Iterable[str] = READ_ROLES, *, operators: bool = True):
        if not (user and user.is_authenticated and user.is_active):
            return self.none()
        lookup = f"{self.team_path}__in" if self.team_path else "pk__in"
        if operators and user.is_staff:
            limit = token_teams(user)
            return self if limit is None else self.filter(**{lookup: limit})
        return self.filter(**{lookup: team_ids(user, roles)})
