from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from audit.models import Outcome
from audit.services import record_event

from . import services
from .forms import TokenForm
from .models import ApiToken, Membership


class LoginView(auth_views.LoginView):
    template_name = "console/login.html"
    redirect_authenticated_user = True

    def form_valid(self, form):
        response = super().form_valid(form)
        services.record_login(user=form.get_user(), success=True)
        return response

    def form_invalid(self, form):
        services.record_login(user=None, success=False, username=form.data.get("username", ""))
        return super().form_invalid(form)


@require_POST
def logout_view(request):
    if request.user.is_authenticated:
        services.record_logout(user=request.user, session_key=request.session.session_key)
    logout(request)
    return redirect("login")


@login_required
def home(request):
    from monitoring.pages import overview  # the overview lives with the live telemetry

    return overview(request)


@login_required
def tokens(request):
    raw = None
    if request.method == "POST":
        if "revoke" in request.POST:
            token = get_object_or_404(ApiToken.objects.live(), pk=request.POST.get("revoke"), user=request.user)
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
                )
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                form = TokenForm(user=request.user)
    else:
        form = TokenForm(user=request.user)
    rows = ApiToken.objects.filter(user=request.user).prefetch_related("teams")
    return render(request, "console/tokens.html", {"form": form, "tokens": rows, "raw": raw})


@login_required
def team_members(request):
    rows = Membership.objects.for_user(request.user).select_related("team", "user").order_by("team__name", "user__username")
    return render(request, "console/members.html", {"memberships": rows})


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


