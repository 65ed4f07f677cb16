"""Who may do what: one table for pages, the API and websocket consumers.

``may(user, action, target)`` answers from ``ACTIONS``. The target is a team (a Team or
its id), an object with a team (``team_id`` or ``team``), or None:

- a team: the user holds one of the action's roles in it;
- an object whose team is None (a fleet alert, a public image): operators only;
- None: the user holds one of the roles in some team (may the page open at all?);
  what the page then shows is tenancy's.

Operators (``tenancy.is_operator``) may everything; an API token limited to some teams
never makes its holder an operator. Roles decide here; which objects a user sees at all
is tenancy's (``for_user``), so another team's object is a 404 before it is a 403.
Services take ``actor=`` and never ask this module.
"""

from __future__ import annotations

from functools import wraps

from channels.db import database_sync_to_async
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.views.decorators.http import require_http_methods
from rest_framework.permissions import BasePermission

from console.tenancy import (
    ADMIN_ROLES,
    AUDIT_ROLES,
    READ_ROLES,
    WRITE_ROLES,
    has_role,
    is_operator,
    team_ids,
)

ANYONE = "anyone signed in"
OPERATORS = ()

# action: (team roles that may, what a refusal says)
ACTIONS: dict[str, tuple[str | tuple[str, ...], str]] = {
    "signed_in": (ANYONE, "Sign in first."),
    "fleet.view": (OPERATORS, "Only operators can see the fleet inventory."),
    "fleet.operate": (OPERATORS, "Only operators can act on hosts and GPUs."),
    "billing.operate": (OPERATORS, "Only operators set prices and issue invoices."),
    "accounts.manage": (OPERATORS, "Only operators create teams and reset someone's two-factor sign-in."),
    "team.read": (READ_ROLES, "Your role in this team does not allow you to see this."),
    "team.write": (WRITE_ROLES, "Your role in this team does not allow you to change this."),
    "team.admin": (ADMIN_ROLES, "Only the team's admins can do this."),
    "costs.read": (READ_ROLES, "You are not in a team whose costs you may see."),
    "billing.read": (AUDIT_ROLES, "Invoices and budgets are for team admins and auditors."),
    "billing.manage": (ADMIN_ROLES, "Only team admins manage budgets, reservations and invoices."),
    "audit.read": (AUDIT_ROLES, "Only team admins, auditors and operators can read the audit log."),
    "alert.act": (WRITE_ROLES, "Your role in this team does not allow you to act on alerts."),
    "alert.configure": (ADMIN_ROLES, "Your role does not allow you to manage alert rules and channels."),
    "image.manage": (WRITE_ROLES, "Only operators manage public images, and a team's members its own."),
    "savings.manage": (ADMIN_ROLES, "Savings advice and idle stop are for team admins and operators."),
}

# A target that belongs to no team (a fleet alert, a public image): operators only.
FLEET = object()


def team_of(target):
    """The team id a target stands for, None for "any team", ``FLEET`` for no team."""
    from console.models import Team

    if target is None or target is FLEET:
        return target
    if isinstance(target, Team):
        return target.pk
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    if hasattr(target, "team_id"):
        return FLEET if target.team_id is None else target.team_id
    if hasattr(target, "team"):
        return FLEET if target.team is None else team_of(target.team)
    raise TypeError(f"{type(target).__name__} is neither a team nor an object with one")


def may(user, action: str, target=None) -> bool:
    roles, _ = ACTIONS[action]  # an unknown action is a bug, never a quiet "no"
    if not (user and user.is_authenticated and user.is_active):
        return False
    if roles == ANYONE or is_operator(user):
        return True
    team = team_of(target)
    if not roles or team is FLEET:
        return False
    if team is None:
        # Whether the page or endpoint opens at all; what it then shows is tenancy's,
        # which also narrows to the teams an API token is limited to.
        from console.models import Membership

        return Membership.objects.filter(user_id=user.pk, role__in=roles).exists()
    return has_role(user, team, roles)


def held_roles_allow(roles: set[str], action: str) -> bool:
    """Whether holding ``roles`` (in some team) allows ``action`` there."""
    allowed, _ = ACTIONS[action]
    return allowed == ANYONE or bool(roles & set(allowed))


def permitted_teams(user, action: str) -> set[int] | None:
    """The ids of the teams where ``user`` may ``action``, None for every team
    (operators): for a list that asks of many objects at once."""
    roles, _ = ACTIONS[action]
    if not (user and user.is_authenticated and user.is_active):
        return set()
    if is_operator(user):
        return None
    if roles == ANYONE:
        raise ValueError(f"{action!r} is not decided per team")
    return set(team_ids(user, roles).values_list("team_id", flat=True)) if roles else set()


def require(user, action: str, target=None, message: str | None = None) -> None:
    if not may(user, action, target):
        raise PermissionDenied(message or ACTIONS[action][1])


def denial(action: str) -> str:
    return ACTIONS[action][1]


def policy_required(action: str, target=None, message: str | None = None, methods=None):
    """For function views: anonymous users go to the sign-in page (as with
    ``login_required``); then ``require``. ``target(request, *args, **kwargs)`` names the
    team from the URL or the form; without it the question is "in any team?". Views
    that first load an object through tenancy (404) ask ``require`` on it themselves.
    ``methods`` answers any other method 405 before the policy is asked, as
    ``require_http_methods`` under ``login_required`` did."""

    def decorate(view):
        @wraps(view)
        def checked(request, *args, **kwargs):
            found = target(request, *args, **kwargs) if target is not None else None
            require(request.user, action, found, message)
            return view(request, *args, **kwargs)

        if methods is not None:
            checked = require_http_methods(methods)(checked)
        guarded = login_required(checked)
        guarded.policy_action = action
        return guarded

    return decorate


class PolicyRequiredMixin(LoginRequiredMixin):
    """For class-based pages: ``policy_action`` (and optionally ``get_policy_target``)."""

    policy_action = "signed_in"
    policy_message: str | None = None

    def get_policy_target(self):
        return None

    def dispatch(self, request, *args, **kwargs):
        if request.user.is_authenticated:
            require(request.user, self.policy_action, self.get_policy_target(), self.policy_message)
        return super().dispatch(request, *args, **kwargs)


class Policy(BasePermission):
    """DRF: the view's ``policy_action`` ("signed_in" unless it names one), asked with no
    target; per-object questions are the view's (``TeamScopedViewSetMixin.require``)."""

    def has_permission(self, request, view):
        action = getattr(view, "policy_action", "signed_in")
        self.message = getattr(view, "policy_message", None) or denial(action)
        return may(request.user, action)


class PolicyConsumer:
    """Channels consumers: ``await self.may(action, target)`` off the event loop."""

    policy_action = "signed_in"

    async def may(self, action: str, target=None) -> bool:
        return await database_sync_to_async(may)(self.scope.get("user"), action, target)
