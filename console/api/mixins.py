from django.core.exceptions import PermissionDenied

from console.tenancy import READ_ROLES, has_role, is_operator


class TeamScopedViewSetMixin:
    """The viewset half of the tenancy mechanism: every queryset is narrowed with
    ``for_user`` (another team's object is a 404), and writes check the user's role."""

    read_roles = READ_ROLES

    def get_queryset(self):
        return super().get_queryset().for_user(self.request.user, self.read_roles)

    def require_role(self, team_id: int, roles, what: str) -> None:
        if is_operator(self.request.user) or has_role(self.request.user, team_id, roles):
            return
        raise PermissionDenied(f"Your role in this team does not allow you to {what}.")


class OperatorOnlyMixin:
    """Fleet inventory: operators (staff) only."""

    def check_permissions(self, request):
        super().check_permissions(request)
        if not is_operator(request.user):
            self.permission_denied(request, message="Only operators can see the fleet inventory.")
