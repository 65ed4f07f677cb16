from console import policy
from console.tenancy import READ_ROLES


class TeamScopedViewSetMixin:
    """The viewset half of the tenancy mechanism: every queryset is narrowed with
    ``for_user`` (another team's object is a 404); writes ask the policy about the
    object's team."""

    read_roles = READ_ROLES

    def get_queryset(self):
        return super().get_queryset().for_user(self.request.user, self.read_roles)

    def require(self, action: str, target, what: str) -> None:
        policy.require(self.request.user, action, target, f"Your role in this team does not allow you to {what}.")
