"""Pages for alert rules, notification channels, and the verbs on one alert (resolve,
silence). Thin: parse the form, check the role, call a service, say what happened."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from console import policy
from console.models import Team
from console.tenancy import ADMIN_ROLES
from console.validators import no_control_characters, plain_name
from instances.models import GpuModel, Host

from . import services
from .models import Alert, AlertRule, ChannelKind, Comparison, NotificationChannel, Severity
from .rules import METRICS, describe

FLEET = "operators"


def owners(user) -> list[tuple[str, str]]:
    """Who the user may make rules and channels for: teams they administer, and the
    operators (fleet) when they are one."""
    found = [(str(t.pk), t.name) for t in Team.objects.for_user(user, ADMIN_ROLES).order_by("name")]
    return ([(FLEET, "Operators (fleet)")] if policy.may(user, "alert.configure", policy.FLEET) else []) + found


def _owner_team(form) -> Team | None:
    owner = form.cleaned_data["owner"]
    return None if owner == FLEET else Team.objects.get(pk=int(owner))


def _back(request, default: str):
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        target = reverse(default)
    return redirect(target)


def _say_invalid(request, exc: ValidationError) -> None:
    for field, errors in (exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}).items():
        messages.error(request, f"{field + ': ' if field else ''}{' '.join(errors)}")


# --- rules ------------------------------------------------------------------------------


class RuleForm(forms.Form):
    owner = forms.ChoiceField(label="For")
    name = forms.CharField(max_length=80, validators=[no_control_characters])
    metric = forms.ChoiceField(choices=[(m, spec.label) for m, spec in METRICS.items()])
    comparison = forms.ChoiceField(choices=Comparison.choices, initial=Comparison.GE)
    threshold = forms.FloatField(min_value=-1e12, max_value=1e12)
    hold_s = forms.IntegerField(label="Holds for (s)", min_value=0, max_value=7 * 86_400, initial=0)
    severity = forms.ChoiceField(choices=Severity.choices, initial=Severity.WARNING)
    host = forms.ModelChoiceField(Host.objects.order_by("name"), required=False, to_field_name="name",
                                  help_text="operators: only this host")
    gpu_model = forms.ModelChoiceField(GpuModel.objects.order_by("name"), required=False, to_field_name="name",
                                       label="GPU model", help_text="operators: only this GPU model")

    def __init__(self, user, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["owner"].choices = owners(user)
        if not policy.may(user, "fleet.view"):
            del self.fields["host"], self.fields["gpu_model"]


@policy.policy_required("signed_in")
def rule_list(request):
    rules = list(AlertRule.objects.for_user(request.user).select_related("team", "host", "gpu_model", "instance"))
    form = RuleForm(request.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        team = _owner_team(form)
        policy.require(request.user, "alert.configure", team or policy.FLEET, "Your role does not allow you to manage these alert rules.")
        data = {k: v for k, v in form.cleaned_data.items() if k != "owner" and v not in (None, "")}
        try:
            rule = services.create_rule(actor=request.user, team=team, **data)
        except ValidationError as exc:
            _say_invalid(request, exc)
        else:
            messages.success(request, f"Rule “{rule.name}” saved.")
            return redirect("alert-rules")
    rows = [{"rule": r, "condition": describe(r.metric, r.comparison, r.threshold, r.hold_s),
             "how": METRICS[r.metric].how, "editable": policy.may(request.user, "alert.configure", r)} for r in rules]
    return render(request, "monitoring/alert_rules.html", {
        "rows": rows, "form": form if owners(request.user) else None, "metrics": METRICS, "tab": "rules",
    })


@policy.policy_required("signed_in", methods=["POST"])
def rule_action(request, pk):
    rule = get_object_or_404(AlertRule.objects.for_user(request.user), pk=pk)
    policy.require(request.user, "alert.configure", rule, "Your role does not allow you to manage this alert rule.")
    verb = request.POST.get("action", "")
    try:
        if verb == "toggle":
            services.update_rule(actor=request.user, rule=rule, enabled=not rule.enabled)
            messages.success(request, f"Rule “{rule.name}” {'disabled' if rule.enabled else 'enabled'}.")
        elif verb == "delete":
            services.delete_rule(actor=request.user, rule=rule)
            messages.success(request, f"Rule “{rule.name}” deleted.")
        elif verb == "silence":
            until = timezone.now() + timedelta(hours=_hours(request))
            services.silence(actor=request.user, rule=rule, ends_at=until, reason=request.POST.get("reason", ""))
            messages.success(request, f"Rule “{rule.name}” silenced until {until:%Y-%m-%d %H:%M} UTC.")
        else:
            messages.error(request, "action: choose toggle, delete or silence.")
    except ValidationError as exc:
        _say_invalid(request, exc)
    return _back(request, "alert-rules")


def _hours(request) -> float:
    try:
        hours = float(request.POST.get("hours", "1"))
    except ValueError:
        raise ValidationError({"hours": "A number of hours."}) from None
    if not 0 < hours <= 24 * 30:
        raise ValidationError({"hours": "Between a minute and 30 days."})
    return hours


# --- channels ------------------------------------------------------------------------------


class ChannelForm(forms.Form):
    owner = forms.ChoiceField(label="For")
    name = forms.CharField(max_length=80, validators=[plain_name])
    kind = forms.ChoiceField(choices=ChannelKind.choices)
    target = forms.CharField(max_length=500, help_text="the URL (webhook, Slack), or comma-separated emails")
    min_severity = forms.ChoiceField(choices=Severity.choices, initial=Severity.INFO, label="From severity")

    def __init__(self, user, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["owner"].choices = owners(user)


@policy.policy_required("signed_in")
def channel_list(request):
    channels = list(NotificationChannel.objects.for_user(request.user).select_related("team"))
    form = ChannelForm(request.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        team = _owner_team(form)
        policy.require(request.user, "alert.configure", team or policy.FLEET, "Your role does not allow you to manage these channels.")
        data = {k: v for k, v in form.cleaned_data.items() if k != "owner"}
        try:
            channel = services.create_channel(actor=request.user, team=team, **data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            note = (f" Its signing secret (shown once): {channel.secret}" if channel.secret else "")
            messages.success(request, f"Channel “{channel.name}” saved.{note}")
            return redirect("alert-channels")
    rows = [{"channel": c, "editable": policy.may(request.user, "alert.configure", c),
             "last": c.deliveries.order_by("-time").first()} for c in channels]
    return render(request, "monitoring/alert_channels.html", {
        "rows": rows, "form": form if owners(request.user) else None, "tab": "channels",
    })


@policy.policy_required("signed_in", methods=["POST"])
def channel_action(request, pk):
    channel = get_object_or_404(NotificationChannel.objects.for_user(request.user), pk=pk)
    policy.require(request.user, "alert.configure", channel, "Your role does not allow you to manage this channel.")
    verb = request.POST.get("action", "")
    if verb == "test":
        delivery = services.send_test(actor=request.user, channel=channel)
        if delivery.ok:
            messages.success(request, f"Test sent to “{channel.name}” ({delivery.duration_ms} ms).")
        else:
            messages.error(request, f"Test to “{channel.name}” failed: {delivery.error}")
    elif verb == "toggle":
        services.update_channel(actor=request.user, channel=channel, enabled=not channel.enabled)
        messages.success(request, f"Channel “{channel.name}” {'disabled' if channel.enabled else 'enabled'}.")
    elif verb == "delete":
        services.delete_channel(actor=request.user, channel=channel)
        messages.success(request, f"Channel “{channel.name}” deleted.")
    else:
        messages.error(request, "action: choose test, toggle or delete.")
    return redirect("alert-channels")


# --- one alert -------------------------------------------------------------------------------


@policy.policy_required("signed_in", methods=["POST"])
def alert_resolve(request, pk):
    alert = get_object_or_404(Alert.objects.for_user(request.user), pk=pk)
    policy.require(request.user, "alert.act", alert)
    try:
        services.resolve_alert(actor=request.user, alert=alert)
    except services.AlertError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Alert resolved: {alert.message}")
    return _back(request, "alert-list")


@policy.policy_required("signed_in", methods=["POST"])
def alert_silence(request, pk):
    alert = get_object_or_404(Alert.objects.for_user(request.user), pk=pk)
    policy.require(request.user, "alert.act", alert)
    try:
        until = timezone.now() + timedelta(hours=_hours(request))
        services.silence(actor=request.user, alert=alert, ends_at=until, reason=request.POST.get("reason", ""))
    except ValidationError as exc:
        _say_invalid(request, exc)
    else:
        messages.success(request, f"No notifications for this alert until {until:%Y-%m-%d %H:%M} UTC.")
    return _back(request, "alert-list")
