"""Who may read the audit log, and which part of it: the one tenancy mechanism
(``AuditEvent.objects.for_user``) plus the question "may this user audit at all?"."""

from django.http import Http404

from console.models import Membership, Team
from console.tenancy import AUDIT_ROLES, is_operator

from .models import AuditEvent

DENIED_MESSAGE = "Only team admins, auditors and operators can read the audit log."


def may_audit(user) -> bool:
    if is_operator(user):
        return True
    if not (user and user.is_authenticated and user.is_active):
        return False
    return Membership.objects.filter(user_id=user.pk, role__in=AUDIT_ROLES).exists()


def visible_events(user):
    """Sealed events only: a pending one (for the moments before it is sealed) has no
    place in the log yet to show, link or prove."""
    return AuditEvent.objects.for_user(user, AUDIT_ROLES).filter(seq__isnull=False)


def audit_teams(user):
    return Team.objects.for_user(user, AUDIT_ROLES)


def check_team(user, team_id: int | None) -> None:
    """Asking for another team's events answers 404, as its objects do."""
    if team_id is not None and not audit_teams(user).filter(pk=team_id).exists():
        raise Http404("No such team.")


def export_team(user, team_id: int | None):
    """The team an export is filed under: the one asked for, or the only one visible."""
    if team_id is not None:
        return team_id
    if is_operator(user):
        return None
    ids = list(audit_teams(user).values_list("pk", flat=True)[:2])
    return ids[0] if len(ids) == 1 else None
