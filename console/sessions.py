"""Browser sessions: an idle timeout and an absolute lifetime (settings
``SESSION_IDLE_SECONDS`` and ``SESSION_ABSOLUTE_SECONDS``), and a record of each
signed-in session so that it can be ended from elsewhere."""

from __future__ import annotations

import time
from importlib import import_module

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import BACKEND_SESSION_KEY, logout
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.dispatch import receiver
from django.http import JsonResponse
from django.utils import timezone

from audit import context
from audit.models import Outcome
from audit.recording import record_event

from . import live, twofactor
from .models import UserSession

STARTED = "_started_at"
SEEN = "_seen_at"
# How often a busy session's last-seen time is written: not on every request.
TOUCH_EVERY_S = 60


def _store(session_key: str):
    return import_module(settings.SESSION_ENGINE).SessionStore(session_key)


@receiver(user_logged_in)
def _note_login(sender, request, user, **kwargs):
    if request is None or not hasattr(request, "session"):
        return
    now = time.time()
    request.session[STARTED] = request.session[SEEN] = now
    if request.session.session_key is None:
        request.session.save()
    ctx = context.current()
    UserSession.objects.update_or_create(
        session_key=request.session.session_key,
        defaults={
            "user": user, "ip": ctx.source_ip, "user_agent": ctx.user_agent[:200],
            "via": getattr(request, "login_via", "password"),
        },
    )


@receiver(user_logged_out)
def _note_logout(sender, request, user, **kwargs):
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        UserSession.objects.filter(session_key=key).delete()


def end_sessions(user, *, keep: str | None = None, sockets: bool = True) -> int:
    """End every browser session of ``user`` but ``keep`` (a session key), and, unless
    ``sockets`` is false, their live sockets once the transaction commits (all of the
    user's, or those of the ended sessions when one is kept). Returns how many ended."""
    rows = UserSession.objects.filter(user=user)
    if keep:
        rows = rows.exclude(session_key=keep)
    keys = list(rows.values_list("session_key", flat=True))
    for key in keys:
        _store(key).delete()
    rows.delete()
    if sockets and keep:
        for key in keys:
            live.end_user_sockets(user.pk, session_key=key)
    elif sockets:
        live.end_user_sockets(user.pk)
    return len(keys)


def ended_why(session) -> str | None:
    """Why this session is over (idle, or past its lifetime), or None if it is not."""
    now = time.time()
    started, seen = session.get(STARTED), session.get(SEEN)
    if started is None or seen is None:
        return None
    if now - started > settings.SESSION_ABSOLUTE_SECONDS:
        return "lifetime"
    if now - seen > settings.SESSION_IDLE_SECONDS:
        return "idle"
    return None


class SessionLimitsMiddleware:
    """Signs out a session idle longer than ``SESSION_IDLE_SECONDS`` or older than
    ``SESSION_ABSOLUTE_SECONDS``; the request then goes on as anonymous."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.user.is_authenticated:
            self.check(request)
        return self.get_response(request)

    def check(self, request):
        session = request.session
        why = ended_why(session)
        if why is not None:
            record_event(actor=request.user, action="auth.session_expired", target=request.user, details={"why": why})
            logout(request)
            if why == "idle":
                minutes = settings.SESSION_IDLE_SECONDS // 60
                messages.info(request, f"You were signed out after {minutes} minutes without activity.")
            else:
                messages.info(request, "Your session reached its maximum length; please sign in again.")
            return
        now = time.time()
        if session.get(STARTED) is None:  # signed in before session limits existed
            session[STARTED] = now
        if now - session.get(SEEN, 0) > TOUCH_EVERY_S:
            session[SEEN] = now
            UserSession.objects.filter(session_key=session.session_key).update(last_seen_at=timezone.now())


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
        from .views import begin_second_factor

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
