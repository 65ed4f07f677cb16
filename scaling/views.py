"""Scaling group pages: the list and one group (settings, instances, the decisions
chart, cost and the decision log). Thin: scope with ``for_user``, read, render."""

from datetime import timedelta

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from billing import charts as billing_charts
from console.forms import apply_errors
from console.policy import may, policy_required, require
from network import interfaces as network_interfaces

from . import charts, costs, services
from .forms import ScalingGroupForm
from .models import ScalingGroup

CHART_WINDOWS = {"1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(hours=24),
                 "7d": timedelta(days=7)}


def _groups(request):
    return ScalingGroup.objects.live().for_user(request.user).select_related("team", "gpu_model", "image")


LOG_SCAN = 5000


def notable(group: ScalingGroup) -> list:
    """Of the latest decisions, newest first, those that acted or saw something new (its
    reason, desired or running count changed); each carries ``alike``, how many
    evaluations after it came to the same, and ``until``, the last of them."""
    rows = list(group.decisions.all()[:LOG_SCAN])
    kept = []
    for d in reversed(rows):  # oldest first
        last = kept[-1] if kept else None
        if last is not None and d.action == "none" and (d.reason, d.desired, d.running) == (
                last.reason, last.desired, last.running):
            last.alike, last.until = last.alike + 1, d.time
            continue
        d.alike, d.until = 0, d.time
        kept.append(d)
    return kept[::-1]


@policy_required("signed_in")
def group_list(request):
    now = timezone.now()
    groups = list(services.with_running(_groups(request)))
    group_costs = costs.group_costs(groups, now=now)
    latest = services.latest_decisions(groups)
    for group in groups:
        group.latest = latest.get(group.pk)
        group.cost = group_costs[group.pk]
    may_create = may(request.user, "team.write")
    return render(request, "scaling/list.html", {"groups": groups, "may_create": may_create})


def _settings(data: dict) -> dict:
    return {**{field: data[field] for field in services.SETTINGS}, "subnet": data["subnet"],
            "security_groups": list(data["security_groups"])}



@policy_required("team.write", message="Your role does not allow creating scaling groups.")
def group_create(request):
    return _group_form(request, None)


@policy_required("signed_in")
def group_edit(request, pk):
    group = get_object_or_404(_groups(request), pk=pk)
    require(request.user, "team.write", group, "Your role does not allow changing scaling groups.")
    return _group_form(request, group)


def _group_form(request, group: ScalingGroup | None):
    """The form to make a group (``group`` None) or change one; the services check it."""
    form = ScalingGroupForm(request.POST or None, user=request.user, group=group)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            if group is None:
                group = services.create_group(actor=request.user, team=data["team"], name=data["name"],
                                              **_settings(data))
                done = "created; it is evaluated within 30 seconds"
            else:
                services.update_group(actor=request.user, group=group, **_settings(data))
                done = "changed; the next evaluation applies it"
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Scaling group {group.name} {done}.")
            return redirect("scaling-group-detail", pk=group.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "scaling/form.html", {"form": form, "group": group}, status=status)


@policy_required("signed_in", methods=["POST"])
def group_delete(request, pk):
    group = get_object_or_404(_groups(request), pk=pk)
    require(request.user, "team.write", group, "Your role does not allow deleting scaling groups.")
    try:
        ended = services.delete_group(actor=request.user, group=group)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("scaling-group-detail", pk=group.pk)
    names = ", ".join(i.name for i in ended) or "none were running"
    messages.success(request, f"Scaling group {group.name} deleted; its instances were terminated ({names}).")
    return redirect("scaling-group-list")


@policy_required("signed_in")
def group_detail(request, pk):
    group = get_object_or_404(_groups(request), pk=pk)
    now = timezone.now()
    window = request.GET.get("window", "6h")
    window = window if window in CHART_WINDOWS else "6h"
    shown = list(group.decisions.filter(time__gt=now - CHART_WINDOWS[window], time__lte=now))
    cost = costs.group_cost(group, now=now)
    days, series = costs.daily(group, now=now)
    everything = request.GET.get("log") == "all"
    log = Paginator(group.decisions.all() if everything else notable(group), 50).get_page(request.GET.get("page"))
    members = group.members.select_related("instance__gpu_model", "instance__host").order_by("-joined_at", "-id")[:100]
    context = {
        "group": group, "cost": cost, "window": window, "windows": list(CHART_WINDOWS),
        "running": services.active_instances(group).count(), "depth": services.current_depth(group, now),
        "members": members, "log": log, "everything": everything, "may_change": may(request.user, "team.write", group),
        "network": network_interfaces.describe_choice(group.network),
        "figures": {"history": charts.history_figure(shown, start=now - CHART_WINDOWS[window], end=now),
                    "cost": billing_charts.daily_cost(days, series, cost.currency)},
    }
    return render(request, "scaling/detail.html", context)
