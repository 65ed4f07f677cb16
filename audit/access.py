"""Who may read the audit log, and which part of it: the one tenancy mechanism
(``AuditEvent.objects.for_user``); whether the user may audit at all is the policy's
(``console.policy``, "audit.read")."""

from django.http import Http404

from console.models import Team
from console.policy import FLEET, may
from console.tenancy import AUDIT_ROLES

from .models import AuditEvent


def visible_events(user):
    """Sealed events only: a pending one (for the moments before it is sealed) has no
    place in the log yet to show, link or prove."""
    return AuditEvent.objects.for_user(user, AUDIT_ROLES).filter(seq__isnull=False)


def reads_whole_log(user) -> bool:
    """Operators (and the system itself) read the whole log, so every verification's whole
    report: its count of records, its segments, any broken record's number and reason."""
    return not getattr(user, "is_authenticated", False) or may(user, "audit.read", FLEET)


def broken_is_theirs(user, verdict) -> bool:
    """Whether a verification's first broken record (``verdict``: a run or a report) is
    one ``user`` may be shown; to anyone else the verdict says only that a record of
    another team is broken. The one rule the page, the API and the ``audit.verify``
    event follow."""
    seq = verdict.first_broken_seq
    if seq is None:
        return False
    return reads_whole_log(user) or visible_events(user).filter(seq=seq).exists()


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
    if may(user, "audit.read", FLEET):
        return None
    ids = list(audit_teams(user).values_list("pk", flat=True)[:2])
    return ids[0] if len(ids) == 1 else None
