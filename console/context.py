from console.models import Membership
from console.tenancy import is_operator


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
            "sees_costs": operator or bool(roles & {"member", "admin"}),
        }
    }
