"""Two-factor sign-in: TOTP (an authenticator app) with one-time recovery codes, on
django-otp's devices. Required for the roles in ``REQUIRE_2FA_ROLES``; optional for
everyone else. Each verb is audited in its transaction.

The rule holds for every request, not only at sign-in: a session remembers the device
that verified it (django-otp) or that the identity provider vouched for a second factor,
and an API token whether it was made with one (``ApiToken.second_factor``). A session or
token without one, of a user whose role now needs it, is refused (``satisfied``)."""

from __future__ import annotations

import base64
import secrets

import qrcode
import qrcode.image.svg
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.models import Device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from audit.models import Outcome
from audit.recording import record_event

from .models import Membership

RECOVERY_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i
# Set on a session signed in through an identity provider that enforces its own MFA.
PROVIDER_MFA = "_second_factor_by_provider"


class TwoFactorError(ValueError):
    """A two-factor request that cannot be honoured; the message says why."""


def roles_of(user) -> set[str]:
    roles = set(Membership.objects.filter(user_id=user.pk).values_list("role", flat=True))
    if user.is_staff:
        roles.add("operator")
    return roles


def required_for(user) -> bool:
    """Whether this deployment requires a second factor of ``user`` (by role)."""
    wanted = set(settings.REQUIRE_2FA_ROLES)
    return bool(wanted and roles_of(user) & wanted)


def session_second_factor(user, session) -> bool:
    """Did this signed-in session pass a second factor (a device of ``user`` verified it,
    or the identity provider vouched for one)?"""
    if session is None:
        return False
    if session.get(PROVIDER_MFA):
        return True
    persistent_id = session.get(DEVICE_ID_SESSION_KEY)
    device = Device.from_persistent_id(persistent_id) if persistent_id else None
    return device is not None and device.user_id == user.pk


def request_second_factor(request) -> bool:
    """Did this request's credential pass a second factor: its API token, else its session."""
    from .models import ApiToken

    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiToken):
        return auth.second_factor
    verified = getattr(request.user, "is_verified", None)  # set by django-otp's middleware
    if verified is not None:
        return bool(verified() or request.session.get(PROVIDER_MFA))
    return session_second_factor(request.user, getattr(request, "session", None))


def satisfied(user, *, second_factor: bool) -> bool:
    """May a credential with (or without) a second factor act for ``user`` now? Asked
    on every request, so a rule that changes applies to credentials made before it."""
    return second_factor or not required_for(user)


def refusal_text(user) -> str:
    if enrolled(user):
        return "Your role requires two-factor sign-in: sign in again with your authenticator code."
    return "Your role requires two-factor sign-in: set up an authenticator to go on."


class SecondFactorGuard(BaseMiddleware):
    """Browser websockets: a session without the second factor its user's role needs
    reaches the consumer as anonymous (closed with 4401), like a signed-out one."""

    async def __call__(self, scope, receive, send):
        user = scope.get("user")
        if user is not None and user.is_authenticated:
            ok = await database_sync_to_async(_socket_allowed)(user, scope.get("session"))
            if not ok:
                scope = dict(scope, user=AnonymousUser())
        return await super().__call__(scope, receive, send)


def _socket_allowed(user, session) -> bool:
    if satisfied(user, second_factor=session_second_factor(user, session)):
        return True
    record_event(
        actor=user, action="auth.2fa_required", target=user, outcome=Outcome.DENIED,
        details={"via": "websocket"},
    )
    return False


def totp_device(user) -> TOTPDevice | None:
    return TOTPDevice.objects.filter(user=user, confirmed=True).first()


def enrolled(user) -> bool:
    return TOTPDevice.objects.filter(user=user, confirmed=True).exists()


def recovery_codes_left(user) -> int:
    return StaticToken.objects.filter(device__user=user, device__confirmed=True).count()


def pending_device(user) -> TOTPDevice:
    """The unconfirmed device being enrolled (a new secret if there is none)."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).first()
    if device is None:
        device = TOTPDevice.objects.create(user=user, name="authenticator", confirmed=False)
    return device


def qr_svg(device: TOTPDevice) -> str:
    """The otpauth:// URL of ``device`` as an inline SVG QR code."""
    image = qrcode.make(device.config_url, image_factory=qrcode.image.svg.SvgPathImage, box_size=8)
    return image.to_string(encoding="unicode")


def secret_base32(device: TOTPDevice) -> str:
    return base64.b32encode(device.bin_key).decode().rstrip("=")


def _normal(code: str) -> str:
    return "".join(code.split()).replace("-", "").lower()[:32]


def _new_recovery_codes(user) -> list[str]:
    StaticDevice.objects.filter(user=user).delete()
    device = StaticDevice.objects.create(user=user, name="recovery codes", confirmed=True)
    codes = ["".join(secrets.choice(RECOVERY_ALPHABET) for _ in range(10)) for _ in range(settings.RECOVERY_CODE_COUNT)]
    StaticToken.objects.bulk_create(StaticToken(device=device, token=code) for code in codes)
    return [f"{code[:5]}-{code[5:]}" for code in codes]


def confirm_enrolment(*, actor, user, code: str) -> list[str]:
    """Confirm the pending device with a code from the app; returns the recovery codes
    (shown once). A wrong code raises TwoFactorError, and stays audited."""
    codes = _confirm(actor=actor, user=user, code=code)
    if codes is None:
        raise TwoFactorError("That code does not match; check the time on your device and try the current code.")
    return codes


@transaction.atomic
def _confirm(*, actor, user, code: str) -> list[str] | None:
    device = TOTPDevice.objects.select_for_update().filter(user=user, confirmed=False).first()
    if device is None:
        raise TwoFactorError("Start the enrolment again: no authenticator is waiting to be confirmed.")
    if not device.verify_token(_normal(code)):
        _record_failure(user, "enrol")
        return None
    TOTPDevice.objects.filter(user=user, confirmed=True).delete()
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    codes = _new_recovery_codes(user)
    record_event(actor=actor, action="auth.2fa_enrol", target=user, details={"user": user.username})
    return codes


@transaction.atomic
def verify(*, user, code: str, via: str = "page"):
    """The device that accepts ``code`` (the authenticator's current code, or an unused
    recovery code, which is then spent), or None. A code accepted once is refused
    after (the device remembers the last time step); failures are audited and
    throttled by django-otp."""
    code = _normal(code)
    if code.isdigit():
        device = TOTPDevice.objects.select_for_update().filter(user=user, confirmed=True).first()
    else:
        device = StaticDevice.objects.select_for_update().filter(user=user, confirmed=True).first()
    if device is not None and device.verify_token(code):
        if isinstance(device, StaticDevice):
            record_event(
                actor=user, action="auth.2fa_recovery_code_used", target=user,
                details={"left": device.token_set.count(), "via": via},
            )
        return device
    _record_failure(user, via)
    return None


def _record_failure(user, via: str) -> None:
    record_event(actor=user, action="auth.2fa_failed", target=user, outcome=Outcome.FAILURE, details={"via": via})


@transaction.atomic
def new_recovery_codes(*, actor, user) -> list[str]:
    if not enrolled(user):
        raise TwoFactorError("Enrol an authenticator first.")
    codes = _new_recovery_codes(user)
    record_event(actor=actor, action="auth.2fa_recovery_codes", target=user, details={"count": len(codes)})
    return codes


@transaction.atomic
def remove(*, actor, user) -> None:
    """The user removes their own second factor (not allowed where their role needs it)."""
    if required_for(user):
        raise TwoFactorError("Your role requires two-factor sign-in; it cannot be removed.")
    _delete_devices(user)
    record_event(actor=actor, action="auth.2fa_remove", target=user, details={"user": user.username})


@transaction.atomic
def reset(*, actor, user) -> None:
    """An operator's recovery for a user who lost their device: the devices go, every
    session of the user ends, and the user enrols again at the next sign-in."""
    from .sessions import end_sessions

    had = enrolled(user)
    _delete_devices(user)
    ended = end_sessions(user)
    record_event(
        actor=actor, action="auth.2fa_reset", target=user,
        details={"user": user.username, "had_device": had, "signed_out": ended},
    )


def _delete_devices(user) -> None:
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()
