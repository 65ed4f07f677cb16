"""The second step of a sign-in: who has passed the password and not yet the second
factor, and the middleware that sends a session lacking a factor its role now needs
back to that step."""

import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import BACKEND_SESSION_KEY, logout
from django.http import JsonResponse
from django.shortcuts import redirect

from . import live, twofactor
from .events import Outcome, record_event

PENDING = "_signin_pending"
PENDING_SECONDS = 300


def begin_second_factor(request, user, next_url: str):
    """The password was right; nobody is signed in until the second factor is too."""
    request.session.cycle_key()
    request.session[PENDING] = {
        "user": user.pk, "backend": user.backend, "at": time.time(), "next": next_url, "tries": 0,
    }
    return redirect("login-verify" if twofactor.enrolled(user) else "login-enrol")


class SecondFactorMiddleware:
    """A session without the second factor that its user's role now needs (signed in
    before the rule, or before a role that needs it) is ended and the sign-in goes on at
    the second step: enter the code, or set up an authenticator first. API calls on such
    a session answer 401."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = request.user
        if user.is_authenticated and settings.REQUIRE_2FA_ROLES:
            if not twofactor.satisfied(user, second_factor=twofactor.request_second_factor(request)):
                return self.refuse(request, user)
        return self.get_response(request)

    @staticmethod
    def refuse(request, user):
        backend = request.session.get(BACKEND_SESSION_KEY, "django.contrib.auth.backends.ModelBackend")
        text = twofactor.refusal_text(user)
        record_event(
            actor=user, action="auth.2fa_required", target=user, outcome=Outcome.DENIED,
            details={"path": request.path[:300]},
        )
        live.end_user_sockets(user.pk, session_key=request.session.session_key)
        logout(request)
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": text, "code": "second_factor_required"}, status=401)
        user.backend = backend
        next_url = request.get_full_path() if request.method == "GET" else "/"
        response = begin_second_factor(request, user, next_url)
        messages.info(request, text)
        return response
