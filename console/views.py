import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login as auth_login
from django.contrib.auth import logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django_otp import login as otp_login

from . import services, twofactor
from .errors import HostileRequest
from .events import Outcome, record_event
from .forms import (
    CodeForm,
    EnrolForm,
    InviteForm,
    PasswordChangeForm,
    RoleForm,
    SignUpForm,
    TokenForm,
)
from .models import ApiToken, Invitation, Membership, Role, Team, UserSession
from .policy import policy_required
from .signin import PENDING, PENDING_SECONDS, begin_second_factor
from .tenancy import ADMIN_ROLES
from .validators import whole_number

# Between the password and the second factor: who, how, where to, since when.
PENDING_TRIES = 5


class LoginView(auth_views.LoginView):
    template_name = "console/login.html"
    redirect_authenticated_user = True

    def form_valid(self, form):
        user = form.get_user()
        if twofactor.enrolled(user) or twofactor.required_for(user):
            return begin_second_factor(self.request, user, self.get_success_url())
        response = super().form_valid(form)
        services.record_login(user=user, success=True)
        return response

    def form_invalid(self, form):
        if not getattr(self.request, "axes_locked_out", False):  # a lockout is audited by console.lockout
            services.record_login(user=None, success=False, username=form.data.get("username", ""))
        return super().form_invalid(form)

    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs) | {"sso": sso_context(self.request)}


def sso_context(request) -> dict | None:
    if not settings.OIDC_ISSUER:
        return None
    return {"name": settings.OIDC_PROVIDER_NAME, "failed": request.GET.get("sso") == "failed"}


def _pending(request):
    pending = request.session.get(PENDING)
    if not pending or time.time() - pending["at"] > PENDING_SECONDS:
        return None, None
    user = User.objects.filter(pk=pending["user"], is_active=True).first()
    return (user, pending) if user is not None else (None, None)


def _finish_sign_in(request, user, pending, device) -> None:
    del request.session[PENDING]
    request.login_via = "password+2fa"
    auth_login(request, user, backend=pending["backend"])
    otp_login(request, device)
    services.record_login(user=user, success=True, via="page+2fa")


def _start_again(request, text="Sign in again: the sign-in was not finished in time."):
    request.session.pop(PENDING, None)
    messages.info(request, text)
    return redirect("login")


def login_verify(request):
    user, pending = _pending(request)
    if user is None:
        return _start_again(request)
    if not twofactor.enrolled(user):
        return redirect("login-enrol")
    form = CodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        device = twofactor.verify(user=user, code=form.cleaned_data["code"])
        if device is not None:
            _finish_sign_in(request, user, pending, device)
            left = twofactor.recovery_codes_left(user)
            if device.persistent_id.startswith("otp_static"):
                messages.warning(request, f"You signed in with a recovery code; {left} left. Make new ones on your account page.")
            return HttpResponseRedirect(pending["next"])  # checked by LoginView; a URL, not a view's name
        pending["tries"] += 1
        request.session[PENDING] = pending
        if pending["tries"] >= PENDING_TRIES:
            return _start_again(request, "Too many wrong codes: sign in again.")
        form.add_error("code", "Wrong or already used code.")
    return render(request, "console/login_verify.html", {"form": form, "who": user.username})


def login_enrol(request):
    """A role that requires two-factor sign-in, and no authenticator yet: enrol now."""
    user, pending = _pending(request)
    if user is None:
        return _start_again(request)
    if twofactor.enrolled(user):
        return redirect("login-verify")
    form = EnrolForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            codes = twofactor.confirm_enrolment(actor=user, user=user, code=form.cleaned_data["code"])
        except twofactor.TwoFactorError as exc:
            form.add_error("code", str(exc))
        else:
            next_url = pending["next"]
            _finish_sign_in(request, user, pending, twofactor.totp_device(user))
            return render(request, "console/recovery_codes.html", {"codes": codes, "next": next_url})
    return render(request, "console/enrol.html", _enrol_context(user, form, during_sign_in=True))


def _enrol_context(user, form, during_sign_in: bool) -> dict:
    device = twofactor.pending_device(user)
    return {
        "form": form, "qr": twofactor.qr_svg(device), "secret": twofactor.secret_base32(device),
        "during_sign_in": during_sign_in, "who": user.username,
    }


@policy_required("signed_in")
def account(request):
    user = request.user
    password_form = PasswordChangeForm(user)
    if request.method == "POST" and "password" in request.POST:
        password_form = PasswordChangeForm(user, request.POST)
        if password_form.is_valid():
            ended = services.change_password(
                actor=user, user=user, password=password_form.cleaned_data["new_password1"], request=request
            )
            messages.success(request, f"Password changed; {ended} other session(s) signed out.")
            return redirect("account")
    context = {
        "password_form": password_form if user.has_usable_password() else None,
        "enrolled": twofactor.enrolled(user),
        "required": twofactor.required_for(user),
        "codes_left": twofactor.recovery_codes_left(user),
        "sessions": UserSession.objects.filter(user=user),
        "current": request.session.session_key,
        "idle_minutes": settings.SESSION_IDLE_SECONDS // 60,
        "absolute_hours": round(settings.SESSION_ABSOLUTE_SECONDS / 3600, 1),
    }
    return render(request, "console/account.html", context)


@policy_required("signed_in")
def account_enrol(request):
    if twofactor.enrolled(request.user):
        return redirect("account")
    form = EnrolForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            codes = twofactor.confirm_enrolment(actor=request.user, user=request.user, code=form.cleaned_data["code"])
        except twofactor.TwoFactorError as exc:
            form.add_error("code", str(exc))
        else:
            otp_login(request, twofactor.totp_device(request.user))
            return render(request, "console/recovery_codes.html", {"codes": codes, "next": "/account/"})
    return render(request, "console/enrol.html", _enrol_context(request.user, form, during_sign_in=False))


@policy_required("signed_in", methods=["POST"])
def account_two_factor(request):
    """Remove the second factor, or make new recovery codes; both ask for a current code."""
    form = CodeForm(request.POST)
    if not form.is_valid() or twofactor.verify(user=request.user, code=form.cleaned_data["code"], via="account") is None:
        messages.error(request, "Wrong or already used code: nothing changed.")
        return redirect("account")
    try:
        if request.POST.get("action") == "remove":
            twofactor.remove(actor=request.user, user=request.user)
            messages.success(request, "Two-factor sign-in removed.")
        else:
            codes = twofactor.new_recovery_codes(actor=request.user, user=request.user)
            return render(request, "console/recovery_codes.html", {"codes": codes, "next": "/account/"})
    except twofactor.TwoFactorError as exc:
        messages.error(request, str(exc))
    return redirect("account")


@policy_required("signed_in", methods=["POST"])
def sign_out_everywhere(request):
    services.sign_out_everywhere(actor=request.user, user=request.user)
    logout(request)
    messages.info(request, "You were signed out everywhere.")
    return redirect("login")


@policy_required("accounts.manage", message="Only operators can reset someone's two-factor sign-in.", methods=["POST"])
def reset_two_factor(request, user_id):
    """An operator's recovery for someone who lost their authenticator."""
    target = get_object_or_404(User, pk=user_id)
    twofactor.reset(actor=request.user, user=target)
    messages.success(request, f"{target.username}'s two-factor sign-in was reset and their sessions ended; they enrol again at the next sign-in.")
    return redirect("team-members")


@require_POST
def logout_view(request):
    if request.user.is_authenticated:
        services.record_logout(user=request.user, session_key=request.session.session_key)
    logout(request)
    return redirect("login")


@policy_required("signed_in")
def tokens(request):
    raw = None
    if request.method == "POST":
        if "revoke" in request.POST:
            pk = _token_id(request.POST["revoke"])
            if pk is None:
                messages.error(request, "No such token: choose one of yours to revoke.")
                return _tokens_page(request, TokenForm(user=request.user), None, status=400)
            token = get_object_or_404(ApiToken.objects.live(), pk=pk, user=request.user)
            services.revoke_api_token(actor=request.user, token=token)
            messages.success(request, f"Token {token.name} revoked.")
            return redirect("tokens")
        form = TokenForm(request.POST, user=request.user)
        if form.is_valid():
            data = form.cleaned_data
            try:
                _, raw = services.create_api_token(
                    actor=request.user, user=request.user, name=data["name"], scopes=data["scopes"],
                    teams=data["teams"], expires_at=form.expires_at,
                    second_factor=twofactor.request_second_factor(request),
                )
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                form = TokenForm(user=request.user)
    else:
        form = TokenForm(user=request.user)
    return _tokens_page(request, form, raw)


def _tokens_page(request, form, raw, status=200):
    rows = ApiToken.objects.filter(user=request.user).prefetch_related("teams")
    return render(request, "console/tokens.html", {"form": form, "tokens": rows, "raw": raw}, status=status)


def _token_id(value: str) -> int | None:
    """A token id from a form: a positive integer that fits the id column, else None."""
    number = whole_number(value.strip())
    return number if number else None


INVITE_LINK = "_invite_link"


@policy_required("signed_in")
def team_members(request):
    """Members of your teams; team admins (and operators) invite, change roles and remove."""
    user = request.user
    managed = Team.objects.for_user(user, ADMIN_ROLES)
    invite_form = InviteForm(teams=managed)
    if request.method == "POST":
        try:
            response, invite_form = _team_action(request, managed)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            response = redirect("team-members")
        if response is not None:
            return response
    managed_ids = set(managed.values_list("pk", flat=True))
    teams = []
    for team in Team.objects.for_user(user).prefetch_related("memberships__user"):
        can_manage = team.pk in managed_ids
        invitations = team.invitations.filter(accepted_at__isnull=True, cancelled_at__isnull=True) if can_manage else []
        teams.append({"team": team, "manage": can_manage, "members": team.memberships.all(), "invitations": invitations})
    context = {
        "new_invite": request.session.pop(INVITE_LINK, None) if managed_ids else None,
        "teams": teams, "invite_form": invite_form if managed_ids else None, "roles": Role.choices,
        "invite_days": settings.INVITE_DAYS,
    }
    return render(request, "console/members.html", context)


def _team_action(request, managed):
    """One POST of the team page: (a response, or None to show the page; the invite form)."""
    user, post = request.user, request.POST
    action = post.get("action")
    if action == "invite":
        form = InviteForm(post, teams=managed)
        if not form.is_valid():
            return None, form
        data = form.cleaned_data
        _, raw = services.invite_member(
            actor=user, team=data["team"], email=data["email"], role=data["role"],
            accept_url=lambda raw: request.build_absolute_uri(f"/invite/{raw}/"),
        )
        messages.success(request, f"Invitation sent to {data['email']}; the link works once, for {settings.INVITE_DAYS} days.")
        # Shown once to the admin who made it (the session is kept server-side), for
        # when the email does not arrive.
        request.session[INVITE_LINK] = {"email": data["email"], "team": data["team"].name,
                                        "link": request.build_absolute_uri(f"/invite/{raw}/")}
    elif action in ("role", "remove"):
        membership = get_object_or_404(
            Membership.objects.filter(team__in=managed).select_related("user", "team"), pk=_pk(post, "membership")
        )
        if action == "role":
            form = RoleForm(post)
            if not form.is_valid():
                raise ValidationError("Choose a role: member, admin or auditor.")
            services.change_role(actor=user, membership=membership, role=form.cleaned_data["role"])
            messages.success(request, f"{membership.user.username} is now {membership.role} of {membership.team.name}.")
        else:
            services.remove_member(actor=user, membership=membership)
            messages.success(request, f"{membership.user.username} left {membership.team.name}; their sessions ended.")
    elif action == "cancel":
        invitation = get_object_or_404(
            Invitation.objects.filter(team__in=managed, accepted_at__isnull=True, cancelled_at__isnull=True),
            pk=_pk(post, "invitation"),
        )
        services.cancel_invitation(actor=user, invitation=invitation)
        messages.success(request, f"Invitation of {invitation.email} cancelled.")
    else:
        raise ValidationError("Unknown action.")
    return redirect("team-members"), None


def _pk(post, name: str) -> int:
    number = whole_number(post.get(name, ""))
    if number is None:
        raise Http404(f"No such {name}.")
    return number


def accept_invite(request, key):
    """An invitation link: join the team (signed in), or make an account first."""
    try:
        invitation = services.find_invitation(key)
    except services.InvitationRefused as exc:
        return render(request, "console/invite.html", {"refused": str(exc)}, status=410)
    form = None if request.user.is_authenticated else SignUpForm(initial={"username": invitation.email.split("@")[0]})
    if request.method == "POST":
        try:
            if request.user.is_authenticated:
                membership = services.accept_invitation(raw=key, user=request.user)
            else:
                form = SignUpForm(request.POST)
                if not form.is_valid():
                    return render(request, "console/invite.html", {"invitation": invitation, "form": form})
                with transaction.atomic():
                    user = services.sign_up(
                        username=form.cleaned_data["username"], email=invitation.email,
                        password=form.cleaned_data["password1"],
                    )
                    membership = services.accept_invitation(raw=key, user=user)
                user.backend = "django.contrib.auth.backends.ModelBackend"
                if twofactor.required_for(user):  # the new role needs a second factor first
                    return begin_second_factor(request, user, "/")
                request.login_via = "invitation"
                auth_login(request, user)
                services.record_login(user=user, success=True, via="invitation")
        except services.InvitationRefused as exc:
            return render(request, "console/invite.html", {"refused": str(exc)}, status=exc.status)
        messages.success(request, f"Welcome to {membership.team.name}: you are {membership.role}.")
        return redirect("home")
    return render(request, "console/invite.html", {"invitation": invitation, "form": form})


def healthz(request):
    return JsonResponse({"status": "ok"})


def forbidden(request, exception=None):
    if request.user.is_authenticated:
        record_event(
            actor=request.user,
            action="page.denied",
            outcome=Outcome.DENIED,
            details={"method": request.method, "path": request.path[:300]},
        )
    return render(request, "console/error.html", {"status": 403, "message": str(exception or "") or "You may not open this page."}, status=403)


def _wants_json(request) -> bool:
    return request.path.startswith("/api/")


def bad_request(request, exception=None):
    # Django's own refusals (a body over DATA_UPLOAD_MAX_MEMORY_SIZE, too many fields)
    # reach here before any view runs; API clients get them as JSON like every other error.
    message = _BAD_REQUEST.get(type(exception).__name__, "The request is malformed.")
    if isinstance(exception, HostileRequest):
        message = str(exception)
    if _wants_json(request):
        return JsonResponse({"detail": message, "code": "bad_request"}, status=400)
    return render(request, "console/error.html", {"status": 400, "message": message}, status=400)


_BAD_REQUEST = {
    "RequestDataTooBig": "The request body is larger than the server accepts.",
    "TooManyFieldsSent": "The request has more fields than the server accepts.",
    "TooManyFilesSent": "The request has more files than the server accepts.",
}


def not_found(request, exception=None):
    if _wants_json(request):
        return JsonResponse({"detail": "Not found.", "code": "not_found"}, status=404)
    return render(request, "console/error.html", {"status": 404, "message": "No such page, or not yours to see."}, status=404)


