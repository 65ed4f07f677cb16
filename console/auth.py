from rest_framework import authentication, exceptions

from console import request_context as context

from . import services


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token gpc_…` (or `Bearer gpc_…`) with a personal API token.
    A revoked or expired token answers 401; what it may do is checked by
    ``console.api.permissions.TokenScope``."""

    keywords = ("token", "bearer")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Token <key>'.")
        try:
            token = services.authenticate_api_token(header[1], source_ip=context.current().source_ip)
        except services.TokenRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return token.user, token

    def authenticate_header(self, request):
        return "Token"
