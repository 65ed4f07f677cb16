import time

from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

from console import twofactor


def code(device, steps_ahead=0):
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() + steps_ahead * device.step
    return f"{totp.token():0{device.digits}d}"


def enrol(user):
    """An enrolled authenticator for ``user``; returns (device, recovery codes)."""
    device = twofactor.pending_device(user)
    codes = twofactor.confirm_enrolment(actor=user, user=user, code=code(device))
    return TOTPDevice.objects.get(pk=device.pk), codes


def password_step(client, username, password="demo-password"):
    return client.post("/login/", {"username": username, "password": password})


def signed_in(client) -> bool:
    return client.get("/account/").status_code == 200


def login_with_device(client, user, device):
    """A session signed in with ``device`` as its second factor."""
    client.force_login(user)
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = device.persistent_id
    session.save()
