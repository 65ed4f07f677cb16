from console import policy
from console.models import Membership


def shell(request):
    """What the page shell needs: the user's teams and roles, and which sections to show
    (asked of the policy's table with the roles read once, not once per section)."""
    user = getattr(request, "user", None)
    if not (user and user.is_authenticated):
        return {}
    memberships = list(Membership.objects.filter(user=user).select_related("team"))
    roles = {m.role for m in memberships}
    operator = policy.may(user, "fleet.view")

    def in_some_team(action: str) -> bool:
        return operator or policy.held_roles_allow(roles, action)

    return {
        "shell": {
            "memberships": memberships,
            "operator": operator,
            "can_launch": in_some_team("team.write"),
            "is_admin": in_some_team("team.admin"),
            "is_auditor": in_some_team("audit.read"),
            # Auditors read every page of their teams, bills included, but change nothing.
            "sees_costs": in_some_team("costs.read"),
            "sees_bills": in_some_team("billing.read"),
            "in_team": operator or bool(roles),
        }
    }
