"""/api/v1/recommendations/: rightsizing advice for a team's running instances, and
dismiss / snooze / restore of one instance's advice; /api/v1/idle-stop-policies/."""

from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from billing import pricing
from console.api.mixins import TeamScopedViewSetMixin
from console.models import Team
from console.policy import require
from console.tenancy import ADMIN_ROLES
from console.validators import parse_month, whole_number
from instances.models import Instance

from . import energy, idle_stop, services
from .models import IdleStopPolicy, Kind, RegionFootprint


def _team_id(value) -> int | None:
    if value in (None, ""):
        return None
    team_id = whole_number(str(value))
    if team_id is None:
        raise ValidationError({"team": "team is a team id (a whole number)."})
    return team_id


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


class RestoreSerializer(serializers.Serializer):
    """The body of restore: which advice to show again. It describes the body (OPTIONS,
    the schema, the browsable API's form); ``services`` checks it, one rule for the API
    and the savings page."""

    kind = serializers.ChoiceField(choices=Kind.choices)


class DismissSerializer(RestoreSerializer):
    """The body of dismiss: which advice, for how long, and why."""

    days = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=services.MAX_SNOOZE_DAYS,
                                    help_text="Days to snooze; empty or absent dismisses for good.")
    reason = serializers.CharField(required=False, allow_blank=True, max_length=services.MAX_REASON_CHARS)


class RecommendationViewSet(TeamScopedViewSetMixin, viewsets.GenericViewSet):
    """Rightsizing advice for running instances (``?team=``, ``?days=7|14``,
    ``?dismissed=1`` to include dismissed and snoozed advice). Savings are billing's
    own prices: a 730-hour month at the current price less one at the proposed price."""

    queryset = Instance.objects.all()
    read_roles = ADMIN_ROLES
    lookup_value_regex = "[0-9]+"
    filter_backends = ()  # its own query parameters above, no field to order by

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

    @extend_schema(request=DismissSerializer, responses=dict)
    @action(detail=True, methods=["post"], serializer_class=DismissSerializer)
    def dismiss(self, request, pk=None):
        instance = self.get_object()
        self.require("savings.manage", instance, "dismiss savings advice")
        data = request.data if isinstance(request.data, dict) else {}
        d = services.dismiss(actor=request.user, instance=instance, kind=data.get("kind"), days=data.get("days"),
                             reason=str(data.get("reason", "")))
        return Response({"instance": instance.pk, "kind": d.kind, "until": d.until.isoformat() if d.until else None})

    @extend_schema(request=RestoreSerializer, responses=dict)
    @action(detail=True, methods=["post"], serializer_class=RestoreSerializer)
    def restore(self, request, pk=None):
        instance = self.get_object()
        self.require("savings.manage", instance, "restore savings advice")
        data = request.data if isinstance(request.data, dict) else {}
        services.restore(actor=request.user, instance=instance, kind=data.get("kind"))
        return Response({"instance": instance.pk, "kind": data.get("kind"), "restored": True})


routes = [("recommendations", RecommendationViewSet, "recommendation")]


class IdleStopPolicySerializer(serializers.ModelSerializer):
    team = serializers.PrimaryKeyRelatedField(queryset=Team.objects.all())
    instance = serializers.PrimaryKeyRelatedField(queryset=Instance.objects.all(), allow_null=True, required=False)
    idle_minutes = serializers.CharField()
    warn_minutes = serializers.CharField(required=False)

    class Meta:
        model = IdleStopPolicy
        fields = ["id", "team", "instance", "idle_minutes", "warn_minutes", "enabled", "updated_at"]
        read_only_fields = ["updated_at"]
        validators = []  # the service decides (one policy per target is an update, not an error)

    def to_representation(self, obj):
        data = super().to_representation(obj)
        data["idle_minutes"], data["warn_minutes"] = obj.idle_minutes, obj.warn_minutes
        return data


class IdleStopPolicyViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, mixins.UpdateModelMixin,
                            mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Opt-in idle stop: stop the team's running instances (or one instance) after
    ``idle_minutes`` with every GPU idle by real activity, with a notice ``warn_minutes``
    before. Off unless a team adds one; ``enabled: false`` turns it off."""

    queryset = IdleStopPolicy.objects.select_related("team", "instance").order_by("id")
    serializer_class = IdleStopPolicySerializer
    filterset_fields = ["team"]
    read_roles = ADMIN_ROLES
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("savings.manage", data["team"], "set idle-stop policies")
        serializer.instance = idle_stop.set_policy(
            actor=self.request.user, team=data["team"], instance=data.get("instance"),
            idle_minutes=data["idle_minutes"], warn_minutes=data.get("warn_minutes", 10),
            enabled=data.get("enabled", True))

    def perform_update(self, serializer):
        policy, data = serializer.instance, serializer.validated_data
        self.require("savings.manage", policy, "change idle-stop policies")
        serializer.instance = idle_stop.set_policy(
            actor=self.request.user, team=policy.team, instance=policy.instance,
            idle_minutes=data.get("idle_minutes", policy.idle_minutes),
            warn_minutes=data.get("warn_minutes", policy.warn_minutes), enabled=data.get("enabled", policy.enabled))

    def perform_destroy(self, policy):
        self.require("savings.manage", policy, "delete idle-stop policies")
        idle_stop.delete_policy(actor=self.request.user, policy=policy)


routes.append(("idle-stop-policies", IdleStopPolicyViewSet, "idle-stop-policy"))


def _footprint(fp: energy.Footprint) -> dict:
    return {"it_kwh": round(fp.it_kwh, 6), "pue": fp.pue, "facility_kwh": round(fp.facility_kwh, 6),
            "kg_co2e": None if fp.kg_co2e is None else round(fp.kg_co2e, 6)}


def _period(params) -> tuple[datetime, datetime, int | None]:
    """(start, end, days): the last ``days`` (1–31, default 7), or a calendar ``month``
    (YYYY-MM, UTC) up to now, as the cost explorer shows it."""
    now = timezone.now()
    month = params.get("month")
    if month is not None:
        try:
            start = pricing.month_start(parse_month(month))
        except ValidationError as exc:
            raise ValidationError({"month": exc.messages}) from None
        if start > now:
            raise ValidationError({"month": "month has not begun."})
        return start, min(pricing.next_month(start), now), None
    days = params.get("days", "7")
    if not days.isascii() or not days.isdigit() or not 1 <= int(days) <= 31:
        raise ValidationError({"days": "days is a whole number from 1 to 31."})
    return now - timedelta(days=int(days)), now, int(days)


class EnergyViewSet(TeamScopedViewSetMixin, viewsets.GenericViewSet):
    """Energy (from NVML's energy counter) and carbon of a team's instances and jobs over the last
    ``days`` (1–31, default 7) or a calendar ``?month=YYYY-MM`` up to now: ``?team=`` (required)."""

    queryset = Team.objects.all()
    filter_backends = ()  # its own query parameters above, no field to order by

    @extend_schema(responses=dict)
    def list(self, request):
        team_id = _team_id(request.query_params.get("team"))
        if team_id is None:
            raise ValidationError({"team": "team is required."})
        team = self.get_queryset().filter(pk=team_id).first()
        if team is None:
            raise NotFound("No such team, or not yours to see.")
        start, end, days = _period(request.query_params)
        rows = energy.by_instance(team.pk, start, end)
        names = dict(Instance.objects.filter(pk__in=list(rows)).values_list("pk", "name"))
        total = energy.total(rows.values())
        jobs = energy.by_job(rows)
        return Response({"team": team.pk, "days": days, "start": start.isoformat(), "end": end.isoformat(),
                         "total": _footprint(total),
                         "jobs": [{"job": pk, **_footprint(fp)} for pk, fp in sorted(jobs.items())],
                         "instances": [{"instance": pk, "name": names.get(pk), **_footprint(fp)}
                                       for pk, fp in sorted(rows.items())]})


class RegionFootprintSerializer(serializers.ModelSerializer):
    pue = serializers.CharField()
    grid_g_co2e_per_kwh = serializers.CharField()

    class Meta:
        model = RegionFootprint
        fields = ["id", "region", "pue", "grid_g_co2e_per_kwh", "updated_at"]
        read_only_fields = ["updated_at"]
        validators = []


class RegionFootprintViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Each region's PUE and grid carbon intensity: everyone reads, operators set (a POST
    for a region that has one replaces it)."""

    queryset = RegionFootprint.objects.select_related("region").order_by("region__name")
    serializer_class = RegionFootprintSerializer

    def perform_create(self, serializer):
        require(self.request.user, "fleet.operate", message="Only operators set a region's PUE and carbon intensity.")
        data = serializer.validated_data
        serializer.instance = energy.set_footprint(actor=self.request.user, region=data["region"], pue=data["pue"],
                                                   grid_g_co2e_per_kwh=data["grid_g_co2e_per_kwh"])


routes += [("energy", EnergyViewSet, "energy"), ("region-footprints", RegionFootprintViewSet, "region-footprint")]
