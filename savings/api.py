"""/api/v1/recommendations/: rightsizing advice for a team's running instances, and
dismiss / snooze / restore of one instance's advice."""

from django.core.exceptions import ValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console.api.mixins import TeamScopedViewSetMixin
from console.tenancy import ADMIN_ROLES
from instances.models import Instance

from . import services


def _team_id(value) -> int | None:
    if value in (None, ""):
        return None
    if not str(value).isascii() or not str(value).isdigit():
        raise ValidationError({"team": "team is a team id (a whole number)."})
    return int(value)


def as_dict(rec: services.Recommendation) -> dict:
    u = rec.usage
    return {
        "instance": rec.instance.pk, "instance_name": rec.instance.name, "team": rec.instance.team_id,
        "kind": rec.kind, "current": rec.current, "proposed": rec.proposed, "proposed_sku": rec.proposed_sku,
        "proposed_count": rec.proposed_count, "reason": rec.reason, "risk": rec.risk,
        "current_per_hour": str(rec.current_per_hour), "proposed_per_hour": str(rec.proposed_per_hour),
        "monthly_saving": str(rec.monthly_saving), "days": rec.days,
        "usage": {"minutes": u.minutes, "devices": u.devices, "mem_peak_bytes": round(u.mem_peak),
                  "mem_p95_bytes": round(u.mem_p95), "activity_p95_pct": round(u.activity_p95, 1),
                  "tensor_avg_pct": None if u.tensor_avg is None else round(u.tensor_avg, 1),
                  "tensor_p95_pct": None if u.tensor_p95 is None else round(u.tensor_p95, 1),
                  "idle_share": round(u.idle_share, 3)},
        "dismissed": rec.dismissal is not None,
        "snoozed_until": rec.dismissal.until.isoformat() if rec.dismissal and rec.dismissal.until else None,
    }


class RecommendationViewSet(TeamScopedViewSetMixin, viewsets.GenericViewSet):
    """Rightsizing advice for running instances (``?team=``, ``?days=7|14``,
    ``?dismissed=1`` to include dismissed and snoozed advice). Savings are billing's
    own prices: a 730-hour month at the current price less one at the proposed price."""

    queryset = Instance.objects.all()
    read_roles = ADMIN_ROLES
    lookup_value_regex = "[0-9]+"

    @extend_schema(responses=dict)
    def list(self, request):
        instances = self.get_queryset()
        team = _team_id(request.query_params.get("team"))
        if team is not None:
            instances = instances.filter(team_id=team)
        days = request.query_params.get("days", "14")
        if days not in ("7", "14"):
            raise ValidationError({"days": "days is 7 or 14."})
        recs = services.recommendations(instances, days=int(days))
        if request.query_params.get("dismissed") not in ("1", "true"):
            recs = [r for r in recs if r.dismissal is None]
        return Response({"count": len(recs), "results": [as_dict(r) for r in recs]})

    @extend_schema(request=dict, responses=dict)
    @action(detail=True, methods=["post"])
    def dismiss(self, request, pk=None):
        instance = self.get_object()
        self.require_role(instance.team_id, ADMIN_ROLES, "dismiss savings advice")
        data = request.data if isinstance(request.data, dict) else {}
        d = services.dismiss(actor=request.user, instance=instance, kind=data.get("kind"), days=data.get("days"),
                             reason=str(data.get("reason", "")))
        return Response({"instance": instance.pk, "kind": d.kind, "until": d.until.isoformat() if d.until else None})

    @extend_schema(request=dict, responses=dict)
    @action(detail=True, methods=["post"])
    def restore(self, request, pk=None):
        instance = self.get_object()
        self.require_role(instance.team_id, ADMIN_ROLES, "restore savings advice")
        data = request.data if isinstance(request.data, dict) else {}
        services.restore(actor=request.user, instance=instance, kind=data.get("kind"))
        return Response({"instance": instance.pk, "kind": data.get("kind"), "restored": True})


routes = [("recommendations", RecommendationViewSet, "recommendation")]
