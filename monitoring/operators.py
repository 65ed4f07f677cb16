"""Operator endpoints outside the API: /metrics for Prometheus and the page where an
operator issues and revokes a host's agent tokens."""

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from rest_framework import exceptions

from audit.models import Outcome
from audit.recording import record_event
from console.auth import ApiTokenAuthentication
from console.policy import may, policy_required
from console.tenancy import token_teams
from console.validators import plain_name, whole_number
from instances.models import Host

from . import exposition, services
from .models import AgentState, HostToken

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metrics(request):
    """Prometheus exposition; an operator's API token (``Authorization: Token …``) or
    an operator's session."""
    user = request.user if request.user.is_authenticated else None
    try:
        found = ApiTokenAuthentication().authenticate(request)
    except exceptions.AuthenticationFailed as exc:
        return _plain(401, f"{exc.detail}\n", {"WWW-Authenticate": "Token"})
    if found is not None:
        user = found[0]
        if "read" not in found[1].scopes:
            return _plain(403, "This API token lacks the 'read' scope.\n")
    if user is None:
        return _plain(401, "Send an operator's API token: Authorization: Token <key>\n", {"WWW-Authenticate": "Token"})
    teams = token_teams(user)
    if not (may(user, "fleet.view") or (user.is_staff and teams is not None)):
        record_event(actor=user, action="api.denied", outcome=Outcome.DENIED,
                     details={"method": request.method, "path": request.path, "reason": "metrics are for operators"})
        return _plain(403, "Only operators can read /metrics.\n")
    # An operator's token limited to some teams reads only the GPUs those teams hold.
    return HttpResponse(exposition.render(teams=teams), content_type=CONTENT_TYPE)


def _plain(status: int, text: str, headers: dict | None = None) -> HttpResponse:
    return HttpResponse(text, status=status, content_type="text/plain; charset=utf-8", headers=headers)


class HostTokenForm(forms.Form):
    name = forms.CharField(max_length=80, required=False, validators=[plain_name],
                           help_text="A label, e.g. where the agent runs. Optional.")


def _token_id(post, name: str) -> int:
    number = whole_number(post.get(name, ""))
    if number is None:
        raise Http404("No such agent token.")
    return number


@policy_required("fleet.operate", message="Only operators manage agent tokens.")
def host_tokens(request, pk):
    host = get_object_or_404(Host.objects.select_related("region"), pk=pk)
    raw = None
    form = HostTokenForm()
    if request.method == "POST":
        if "revoke" in request.POST:
            token = get_object_or_404(HostToken.objects.live(), pk=_token_id(request.POST, "revoke"), host=host)
            services.revoke_host_token(actor=request.user, token=token)
            messages.success(request, f"Token {token.prefix}… revoked; its agent is refused from now on.")
            return redirect("host-tokens", pk=host.pk)
        if "rotate" in request.POST:
            token = get_object_or_404(HostToken.objects.live(), pk=_token_id(request.POST, "rotate"), host=host)
            try:
                new, raw = services.rotate_host_token(actor=request.user, token=token)
            except services.TokenError as exc:
                messages.error(request, str(exc))
                return redirect("host-tokens", pk=host.pk)
            until = HostToken.objects.get(pk=token.pk).expires_at
            messages.success(
                request, f"Token {token.prefix}… keeps working until {until:%Y-%m-%d %H:%M} UTC; "
                f"give the agent {new.prefix}… before then."
            )
        else:
            form = HostTokenForm(request.POST)
            if form.is_valid():
                _, raw = services.create_host_token(actor=request.user, host=host, name=form.cleaned_data["name"])
                form = HostTokenForm()
    context = {
        "host": host,
        "form": form,
        "raw": raw,
        "tokens": HostToken.objects.filter(host=host).select_related("created_by"),
        "agent": AgentState.objects.filter(host=host).first(),
        "server": request.build_absolute_uri("/ws/agent/").replace("http", "ws", 1),
    }
    return render(request, "host_tokens/host_tokens.html", context)
