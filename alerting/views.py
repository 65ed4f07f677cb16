"""Alert pages: the alerts list, alert rules, notification channels, and the verbs on
one alert (acknowledge, resolve, silence). Thin: parse the form, check the role, call a service, say what happened."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from console import policy
from console.models import Team
from console.tenancy import ADMIN_ROLES
from console.validators import no_control_characters, plain_name
from instances.models import GpuModel, Host
from monitoring import charts
from monitoring.models import stale_after_s

from . import services
from .models import (
    ACTIVE_STATES,
    Alert,
    AlertKind,
    AlertRule,
    AlertState,
    Category,
    ChannelKind,
    Comparison,
    NotificationChannel,
    Severity,
    Silence,
)
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
    # A path on this site only; redirect() would take any other word for a view's name.
    if not (target.startswith("/") and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure())):
        target = reverse(default)
    return HttpResponseRedirect(target)


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
    return render(request, "alerting/alert_rules.html", {
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
    return render(request, "alerting/alert_channels.html", {
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


def _act_on_alert(request, pk, verb, done: str):
    alert = get_object_or_404(Alert.objects.for_user(request.user), pk=pk)
    policy.require(request.user, "alert.act", alert)
    try:
        verb(actor=request.user, alert=alert)
    except services.AlertError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Alert {done}: {alert.message}")
    return _back(request, "alert-list")


@policy.policy_required("signed_in", methods=["POST"])
def alert_resolve(request, pk):
    return _act_on_alert(request, pk, services.resolve_alert, "resolved")


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


# --- the alerts list and acknowledging ---------------------------------------------


ALERT_STATE_FILTERS = {"active": ACTIVE_STATES, **{s: (s,) for s in AlertState.values}, "all": None}


@policy.policy_required("signed_in")
def alert_list(request):
    """Every kind of alert (telemetry, budget, billing, audit) of the user's teams
    (operators: every alert), filtered by state, category, kind, severity and team."""
    visible = Alert.objects.for_user(request.user)
    qs = visible.select_related("host", "acknowledged_by", "resolved_by", "instance", "team", "rule")
    teams = list(Team.objects.for_user(request.user).order_by("name"))
    state = request.GET.get("state") or "active"
    choices = {"kind": AlertKind, "category": Category, "severity": Severity}
    picked = {name: request.GET.get(name, "") for name in choices}
    team = request.GET.get("team", "")
    errors = []
    if state not in ALERT_STATE_FILTERS:
        errors.append(
            f"state: unknown value {state!r}; choose one of {', '.join(ALERT_STATE_FILTERS)}."
        )
    elif ALERT_STATE_FILTERS[state] is not None:
        qs = qs.filter(state__in=ALERT_STATE_FILTERS[state])
    for name, values in choices.items():
        if picked[name] and picked[name] not in values.values:
            errors.append(f"{name}: unknown value {picked[name]!r}; choose one of {', '.join(values.values)}.")
        elif picked[name]:
            qs = qs.filter(**{name: picked[name]})
    if team and team not in {str(t.pk) for t in teams}:
        errors.append("team: no such team among yours.")
    elif team:
        qs = qs.filter(team_id=int(team))
    page = Paginator(qs, 50).get_page(request.GET.get("page"))
    shown = page.object_list if not errors else []
    context = {
        "page": page if not errors else None,
        "errors": errors,
        "teams": teams,
        "states": [("active", "Open or acknowledged"), *AlertState.choices, ("all", "Any state")],
        "kinds": AlertKind.choices,
        "categories": Category.choices,
        "severities": Severity.choices,
        "state": state,
        "team": team,
        **picked,
        "counts": active_counts(visible),
        "query": request.GET.urlencode(),
        "acknowledgeable": acknowledgeable(request.user, shown),
        "actionable": actionable(request.user, shown),
        "silenced": silenced_ids(shown),
        "tab": "alerts",
        "live": {
            "subscribe": live_groups(request.user, teams),
            "stale_after_s": stale_after_s(),
            "client": charts.client_settings(),
            # A new alert this page's filters would list is added as a row when it opens.
            "alert_rows": {
                "shows_open": state in ("active", "open", "all") and not errors and page.number == 1,
                "filters": {name: value for name, value in picked.items() if value} | (
                    {"team": int(team)} if team and not errors else {}
                ),
                "kinds": dict(AlertKind.choices),
                "categories": dict(Category.choices),
            },
        },
    }
    return render(request, "alerting/alerts.html", context, status=400 if errors else 200)


def active_counts(visible) -> dict:
    """Open or acknowledged alerts per category, as the overview counts them."""
    rows = dict(visible.filter(state__in=ACTIVE_STATES).values_list("category").annotate(n=Count("id")))
    return {"total": sum(rows.values()),
            "categories": [(value, label, rows.get(value, 0)) for value, label in Category.choices]}


def acknowledgeable(user, alerts) -> set[int]:
    """The ids of ``alerts`` this user may acknowledge."""
    return {pk for pk in actionable(user, alerts) if pk in {a.pk for a in alerts if a.state == AlertState.OPEN}}


def actionable(user, alerts) -> set[int]:
    """The ids of the active ``alerts`` this user may acknowledge, resolve or silence."""
    active = [a for a in alerts if a.state in ACTIVE_STATES]
    writable = policy.permitted_teams(user, "alert.act")
    return {a.pk for a in active if writable is None or a.team_id in writable}


def silenced_ids(alerts) -> set[int]:
    now = timezone.now()
    live = list(Silence.objects.filter(starts_at__lte=now, ends_at__gt=now).values_list("key", "rule_id"))
    keys = {k for k, _ in live if k}
    rules = {r for k, r in live if not k and r}
    return {a.pk for a in alerts if a.key in keys or (a.rule_id and a.rule_id in rules)}


def live_groups(user, teams) -> list[dict]:
    if policy.may(user, "fleet.view"):
        return [{"kind": "fleet", "id": None}]
    return [{"kind": "team", "id": t.pk} for t in teams]


@policy.policy_required("signed_in", methods=["POST"])
def alert_acknowledge(request, pk):
    return _act_on_alert(request, pk, services.acknowledge_alert, "acknowledged")
