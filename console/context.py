from console.models import Membership
from console.tenancy import AUDIT_ROLES, READ_ROLES, is_operator


def shell(request):
    """What the page shell needs: the user's teams and roles, and which sections to show."""
    user = getattr(request, "user", None)
    if not (user and user.is_authenticated):
        return {}
    memberships = list(Membership.objects.filter(user=user).select_related("team"))
    roles = {m.role for m in memberships}
    operator = is_operator(user)
    return {
        "shell": {
            "memberships": memberships,
            "operator": operator,
            "can_launch": operator or bool(roles & {"member", "admin"}),
            "is_admin": operator or "admin" in roles,
            "is_auditor": operator or bool(roles & {"auditor", "admin"}),
            # Auditors read every page of their teams, bills included, but change nothing.
            "sees_costs": operator or bool(roles & set(READ_ROLES)),
            "sees_bills": operator or bool(roles & set(AUDIT_ROLES)),
            "in_team": operator or bool(roles),
        }
    }
