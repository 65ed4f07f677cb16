"""The Savings page: a team's rightsizing advice, for its admins and for operators."""

from datetime import timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from billing.models import currency
from console.models import Team
from console.policy import policy_required, require
from console.tenancy import ADMIN_ROLES
from console.validators import whole_number
from instances.models import Instance

from . import commitments, energy, idle_stop, services, useful_work
from .models import IdleStopNotice, IdleStopPolicy


def _team(request) -> tuple[Team, list[Team]]:
    teams = Team.objects.for_user(request.user, ADMIN_ROLES).order_by("name")
    chosen = request.GET.get("team", "")
    team = teams.filter(pk=pk).first() if (pk := whole_number(chosen)) is not None else teams.first()
    if team is None:
        raise PermissionDenied("Savings advice is for team admins and operators.")
    return team, list(teams)


@policy_required("savings.manage", message="Savings advice is for team admins and operators.", methods=["GET"])
def savings(request):
    team, teams = _team(request)
    days = 7 if request.GET.get("days") == "7" else 14
    recs = services.recommendations(Instance.objects.filter(team=team), days=days)
    now = timezone.now()
    footprints = energy.by_instance(team.pk, now - timedelta(days=days), now)
    names = dict(Instance.objects.filter(pk__in=list(footprints)).values_list("pk", "name"))
    total = energy.total(footprints.values())
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
        "team_policy": IdleStopPolicy.objects.filter(team=team, instance__isnull=True).first(),
        "notices": IdleStopNotice.objects.filter(team=team).select_related("instance").order_by("-warned_at")[:20],
    }
    return render(request, "savings/savings.html", context)


@policy_required("signed_in", methods=["POST"])
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


def _idle_stop_target(request, pk: int | None) -> tuple[Team, Instance | None, str]:
    """(team, instance or None for the team's policy, the page to go back to); another team's
    instance or team answers 404, a member of the team 403."""
    if pk is None:
        chosen = request.POST.get("team", "")
        if (team_id := whole_number(chosen)) is None:
            raise Http404("No such team.")
        team = get_object_or_404(Team.objects.for_user(request.user), pk=team_id)
        instance, back = None, f"{reverse('savings')}?team={team.pk}"
    else:
        instance = get_object_or_404(Instance.objects.for_user(request.user).select_related("team"), pk=pk)
        team, back = instance.team, reverse("instance-detail", args=[instance.pk])
    require(request.user, "savings.manage", team, "Only the team's admins set idle stop.")
    return team, instance, back


@policy_required("signed_in", methods=["POST"])
def idle_stop_policy(request, pk: int | None = None):
    """Set the team's idle-stop policy (or one instance's) from the Savings or instance page."""
    team, instance, back = _idle_stop_target(request, pk)
    post = request.POST
    values = {"idle_minutes": post.get("idle_minutes", "").strip(), "warn_minutes": post.get("warn_minutes", "").strip(),
              "enabled": post.get("enabled") == "on"}
    try:
        idle_stop.set_policy(actor=request.user, team=team, instance=instance, **values)
    except ValidationError as exc:
        context = {"team": team, "instance": instance, "back": back, "values": values, "errors": exc.message_dict}
        return render(request, "savings/idle_stop.html", context, status=400)
    target = instance.name if instance else f"every instance of {team.name}"
    if values["enabled"]:
        messages.success(request, f"Idle stop on for {target}: after {values['idle_minutes']} idle minutes, "
                                  f"with a notice {values['warn_minutes']} minutes before.")
    else:
        messages.success(request, f"Idle stop off for {target}.")
    return redirect(back)
