"""Energy, carbon and idle stop on other apps' pages (instance, cost explorer, team), read
from savings.energy's one computation and the team's idle-stop policies."""

from datetime import datetime, timedelta

from django import template
from django.utils import timezone

from console.policy import may

from .. import energy
from ..models import IdleStopPolicy

register = template.Library()

DAYS = 7  # the same window as GET /api/v1/energy/ without ?days=


@register.inclusion_tag("savings/_instance.html", takes_context=True)
def instance_savings(context, instance):
    """The instance's energy and carbon over the last week, and its idle-stop policy
    (its own, else its team's), with the form for the team's admins."""
    end = timezone.now()
    return {
        "instance": instance, "days": DAYS,
        "footprint": energy.by_instance(instance.team_id, end - timedelta(days=DAYS), end,
                                        instance_id=instance.pk).get(instance.pk),
        "own": IdleStopPolicy.objects.filter(instance=instance).first(),
        "team_policy": IdleStopPolicy.objects.filter(team_id=instance.team_id, instance__isnull=True).first(),
        "may_set": may(context["request"].user, "savings.manage", instance), "csrf_token": context.get("csrf_token"),
    }


@register.inclusion_tag("savings/_energy.html")
def team_energy(team, start: datetime | None = None, end: datetime | None = None):
    """The team's energy and carbon over [start, end), the last week by default; a period
    still running ends now."""
    now = timezone.now()
    end = min(end or now, now)
    start = start or end - timedelta(days=DAYS)
    return {"team": team, "footprint": energy.team_total(team.pk, start, end), "start": start, "end": end,
            "week": start == end - timedelta(days=DAYS)}


@register.inclusion_tag("savings/_team_idle_stop.html")
def team_idle_stop(team):
    """The team's idle-stop policy, read-only (admins change it on the Savings page)."""
    return {"team": team, "policy": IdleStopPolicy.objects.filter(team=team, instance__isnull=True).first()}
