"""The Savings page: a team's rightsizing advice, for its admins and for operators."""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from billing.models import currency
from console.models import Team
from console.tenancy import ADMIN_ROLES
from instances.models import Instance

from . import commitments, energy, services, useful_work
from .models import IdleStopNotice, IdleStopPolicy


def _team(request) -> tuple[Team, list[Team]]:
    teams = Team.objects.for_user(request.user, ADMIN_ROLES).order_by("name")
    chosen = request.GET.get("team", "")
    team = teams.filter(pk=chosen).first() if chosen.isascii() and chosen.isdigit() else teams.first()
    if team is None:
        raise PermissionDenied("Savings advice is for team admins and operators.")
    return team, list(teams)


@login_required
@require_GET
def savings(request):
    team, teams = _team(request)
    days = 7 if request.GET.get("days") == "7" else 14
    recs = services.recommendations(Instance.objects.filter(team=team), days=days)
    now = timezone.now()
    footprints = energy.by_instance(team.pk, now - timedelta(days=days), now)
    names = dict(Instance.objects.filter(pk__in=list(footprints)).values_list("pk", "name"))
    total = energy.ZERO
    for fp in footprints.values():
        total = energy.add(total, fp)
    context = {
        "team": team, "teams": teams, "days": days, "currency": currency(),
        "open": [r for r in recs if r.dismissal is None], "set_aside": [r for r in recs if r.dismissal is not None],
        "total": sum((r.monthly_saving for r in recs if r.dismissal is None), start=services.Decimal(0)),
        "energy": sorted(((names.get(pk, pk), fp) for pk, fp in footprints.items()), key=lambda r: -r[1].it_kwh),
        "energy_total": total,
        "commitments": commitments.advise(team, now=now, days=30),
        "waste": useful_work.waste_by_day(team, now=now, days=days),
        "per_pflop": useful_work.work(team, now=now, days=days),
        "policies": IdleStopPolicy.objects.filter(team=team).select_related("instance").order_by("instance__name"),
        "notices": IdleStopNotice.objects.filter(team=team).select_related("instance").order_by("-warned_at")[:20],
    }
    return render(request, "savings/savings.html", context)


@login_required
@require_POST
def dismiss(request, pk: int):
    instance = get_object_or_404(Instance.objects.for_user(request.user, ADMIN_ROLES), pk=pk)
    try:
        if request.POST.get("restore"):
            services.restore(actor=request.user, instance=instance, kind=request.POST.get("kind"))
            messages.success(request, f"Advice for {instance.name} shown again.")
        else:
            services.dismiss(actor=request.user, instance=instance, kind=request.POST.get("kind"),
                             days=request.POST.get("days") or None)
            messages.success(request, f"Advice for {instance.name} set aside.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect(f"{reverse('savings')}?team={instance.team_id}")
