"""Scaling group pages: the list and one group (settings, instances, the decisions
chart, cost and the decision log). Thin: scope with ``for_user``, read, render."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from billing import charts as billing_charts

from . import charts, costs, services
from .models import ScalingGroup

CHART_WINDOWS = {"1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(hours=24),
                 "7d": timedelta(days=7)}


def _groups(request):
    return ScalingGroup.objects.for_user(request.user).select_related("team", "gpu_model", "image")


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


@login_required
def group_list(request):
    now = timezone.now()
    groups = list(_groups(request))
    for group in groups:
        group.running = services.active_instances(group).count()
        group.latest = group.decisions.first()
        group.cost = costs.group_cost(group, now=now)
    return render(request, "scaling/list.html", {"groups": groups})


@login_required
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
        "members": members, "log": log, "everything": everything,
        "figures": {"history": charts.history_figure(shown),
                    "cost": billing_charts.daily_cost(days, series, cost.currency)},
    }
    return render(request, "scaling/detail.html", context)
