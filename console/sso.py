"""Single sign-on over OpenID Connect, on mozilla-django-oidc; on when ``OIDC_ISSUER`` is
set. The provider's endpoints come from its discovery document. A user is found by the
provider's subject (once linked) or by a *verified* email, or created; team roles can
follow a claim (``OIDC_TEAMS_CLAIM``, values ``<team-slug>:<role>``); local passwords
can be turned off for SSO users (``OIDC_LOCAL_PASSWORDS=false``). Where a role needs a
second factor, SSO is followed by the local one unless ``OIDC_IDP_ENFORCES_MFA``."""

from __future__ import annotations

import logging
import re

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation, ValidationError
from django.db import transaction
from django.http import Http404, HttpResponseRedirect
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from audit.models import Outcome
from audit.recording import record_event

from . import services, twofactor
from .models import ExternalIdentity, Membership, Role, Team

log = logging.getLogger(__name__)

DISCOVERY_CACHE_S = 3600
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
SSO_ACTOR = "sso"
BACKEND = "console.sso.Backend"


class SignInRefused(Exception):
    """Why an SSO sign-in did not go through (audited, shown as a failed sign-in)."""


def enabled() -> bool:
    return bool(settings.OIDC_ISSUER)


def discovery() -> dict:
    """The provider's /.well-known/openid-configuration, cached for an hour."""
    key = f"oidc-discovery:{settings.OIDC_ISSUER}"
    document = cache.get(key)
    if document is None:
        response = requests.get(
            f"{settings.OIDC_ISSUER}/.well-known/openid-configuration", timeout=settings.OIDC_TIMEOUT
        )
        response.raise_for_status()
        document = response.json()
        if str(document.get("issuer", "")).rstrip("/") != settings.OIDC_ISSUER:
            raise ImproperlyConfigured(f"The provider at {settings.OIDC_ISSUER} names another issuer: {document.get('issuer')!r}")
        cache.set(key, document, DISCOVERY_CACHE_S)
    return document


def oidc_setting(attr, *args):
    if attr in ENDPOINTS:
        return getattr(settings, attr, None) or discovery()[ENDPOINTS[attr]]
    return import_from_settings(attr, *args)


class Backend(OIDCAuthenticationBackend):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        # Django builds every backend for every sign-in, password ones too: reach the
        # provider only when an SSO callback is being handled.
        self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        if not enabled() or request is None or "nonce" not in kwargs:
            return None  # not our callback (a password sign-in, an API token exchange)
        super().__init__()
        return super().authenticate(request, **kwargs)

    def _verify_jws(self, payload, key):
        """Also check what mozilla-django-oidc leaves out: the audience and the issuer."""
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"The ID token is signed with {header.get('alg')!r}, not {self.OIDC_RP_SIGN_ALGO}.")
        try:
            return jwt.decode(
                payload, key, algorithms=[self.OIDC_RP_SIGN_ALGO], audience=self.OIDC_RP_CLIENT_ID,
                issuer=discovery()["issuer"], options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"The ID token was refused: {exc}.") from None

    def verify_claims(self, claims):
        if not claims.get("email") or claims.get("email_verified") is not True:
            self._refuse("the provider did not vouch for an email address (email_verified)")
        if not claims.get("sub"):
            self._refuse("the provider sent no subject (sub)")
        return True

    def _refuse(self, why: str):
        self.request.sso_refusal = why
        raise SuspiciousOperation(why)

    def filter_users_by_claims(self, claims):
        linked = ExternalIdentity.objects.filter(issuer=settings.OIDC_ISSUER, subject=claims["sub"]).values("user_id")
        users = self.UserModel.objects.filter(pk__in=linked)
        if users.exists():
            return users
        users = self.UserModel.objects.filter(email__iexact=claims["email"])
        if len(users) > 1:
            self.request.sso_refusal = "several accounts share this email address"
        return users

    def get_or_create_user(self, access_token, id_token, payload):
        with transaction.atomic():  # the account, its link and its teams together
            return super().get_or_create_user(access_token, id_token, payload)

    def create_user(self, claims):
        user = self.UserModel.objects.create_user(_free_username(claims), email=claims["email"])
        user.set_unusable_password()
        user.save(update_fields=["password"])
        record_event(actor=SSO_ACTOR, action="auth.sso_user_created", target=user,
                     details={"username": user.username, "email": claims["email"], "issuer": settings.OIDC_ISSUER})
        return self.update_user(user, claims)

    def update_user(self, user, claims):
        ExternalIdentity.objects.update_or_create(
            issuer=settings.OIDC_ISSUER, subject=claims["sub"], defaults={"user": user, "last_login_at": timezone.now()}
        )
        if not settings.OIDC_LOCAL_PASSWORDS and user.has_usable_password():
            user.set_unusable_password()
            user.save(update_fields=["password"])
            record_event(actor=SSO_ACTOR, action="auth.local_password_disabled", target=user, details={"username": user.username})
        if settings.OIDC_TEAMS_CLAIM and settings.OIDC_TEAMS_CLAIM in claims:  # absent: leave teams alone
            sync_teams(user, claims[settings.OIDC_TEAMS_CLAIM])
        return user


def _free_username(claims) -> str:
    wanted = claims.get("preferred_username") or claims["email"].split("@")[0]
    base = re.sub(r"[^\w.@+-]", "", wanted)[:140] or "user"
    User = get_user_model()
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}{n}"
    return name


def parse_team_claim(values) -> dict[int, str]:
    """{team id: role} from claim values ``<team-slug>:<role>``; others are ignored."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list):
        return {}
    wanted: dict[str, str] = {}
    for value in values:
        slug, _, role = str(value).partition(":")
        if role in Role.values:
            wanted[slug] = role
    teams = dict(Team.objects.filter(slug__in=list(wanted)).values_list("slug", "pk"))
    return {teams[slug]: role for slug, role in wanted.items() if slug in teams}


def sync_teams(user, values) -> None:
    """Make the user's memberships what the claim says: added, changed, removed."""
    wanted = parse_team_claim(values)
    held = {m.team_id: m for m in Membership.objects.filter(user=user).select_related("team", "user")}
    for team_id, role in wanted.items():
        try:
            if team_id not in held:
                services.add_member(actor=SSO_ACTOR, team=Team.objects.get(pk=team_id), user=user, role=role)
            elif held[team_id].role != role:
                services.change_role(actor=SSO_ACTOR, membership=held[team_id], role=role)
        except ValidationError as exc:
            log.warning("SSO could not give %s the role %s: %s", user, role, exc)
    for team_id, membership in held.items():
        if team_id not in wanted:
            try:
                services.remove_member(actor=SSO_ACTOR, membership=membership)
            except ValidationError as exc:
                log.warning("SSO could not remove %s from team %s: %s", user, team_id, exc)


def record_failure(request, why: str) -> None:
    record_event(actor=request.user if request.user.is_authenticated else None, action="auth.sso_failed",
                 outcome=Outcome.FAILURE, details={"reason": why[:300], "issuer": settings.OIDC_ISSUER})


class AuthenticateView(OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request):
        if not enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except (requests.RequestException, ImproperlyConfigured, ValueError, KeyError) as exc:
            record_failure(request, f"the provider's discovery document could not be read: {exc}")
            return HttpResponseRedirect(settings.LOGIN_REDIRECT_URL_FAILURE)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)

    def get(self, request):
        if not enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            response = super().get(request)
        except SuspiciousOperation as exc:
            record_failure(request, getattr(request, "sso_refusal", None) or str(exc))
            return self.login_failure()
        except (requests.RequestException, ImproperlyConfigured, ValueError, KeyError) as exc:
            record_failure(request, f"the provider could not be reached or answered badly: {exc}")
            return self.login_failure()
        if not getattr(self, "signed_in", False):
            record_failure(request, self.why_not(request))
        return response

    @staticmethod
    def why_not(request) -> str:
        if getattr(request, "sso_refusal", None):
            return request.sso_refusal
        if request.GET.get("error"):
            return f"the provider answered {request.GET['error'][:100]!r}"
        if "code" in request.GET and "state" in request.GET:
            return "the state matches no sign-in started from this browser"
        return "the provider sent back no code and state"

    def login_success(self):
        self.signed_in = True
        user = self.user
        if not settings.OIDC_IDP_ENFORCES_MFA and (twofactor.enrolled(user) or twofactor.required_for(user)):
            from .views import begin_second_factor

            user.backend = BACKEND
            return begin_second_factor(self.request, user, self.success_url)
        self.request.login_via = "sso"
        response = super().login_success()
        if settings.OIDC_IDP_ENFORCES_MFA:
            self.request.session[twofactor.PROVIDER_MFA] = True
        services.record_login(user=user, success=True, via="sso")
        return response
