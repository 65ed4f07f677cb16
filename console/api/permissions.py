"""What an API token may do: every request made with one needs a scope."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from console.models import ApiToken, Scope


def required_scope(request, view) -> str:
    """A view may name its own (``token_scope``); otherwise reads need ``read`` and
    everything else ``write``."""
    named = getattr(view, "token_scope", None)
    if named:
        return named
    return Scope.READ if request.method in SAFE_METHODS else Scope.WRITE


class TokenScope(BasePermission):
    """Requests with a session pass; a token must hold the scope the request needs
    (403 naming it)."""

    def has_permission(self, request, view):
        token = request.auth
        if not isinstance(token, ApiToken):
            return True
        needed = required_scope(request, view)
        if needed in token.scopes:
            return True
        self.message = f"This API token lacks the '{needed}' scope (it has: {', '.join(token.scopes) or 'none'})."
        return False
