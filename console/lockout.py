"""Sign-in throttling by django-axes (settings: AXES_*): the answer to a locked-out
sign-in, and its audit record."""

from axes.signals import user_locked_out
from django.conf import settings
from django.dispatch import receiver
from django.http import JsonResponse
from django.shortcuts import render


def message() -> str:
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    return f"Too many failed sign-ins: try again in {minutes} minutes."


def locked_out(request, credentials=None, *args, **kwargs):
    """AXES_LOCKOUT_CALLABLE: 429, JSON for the API, the sign-in page otherwise."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message(), "code": "locked_out"}, status=429)
    return render(request, "console/error.html", {"status": 429, "message": message()}, status=429)


@receiver(user_locked_out)
def audit_lockout(sender, request=None, username=None, ip_address=None, **kwargs):
    from audit.refusals import record_refusal

    record_refusal(action="auth.locked_out", details={"username": (username or "")[:150]})
