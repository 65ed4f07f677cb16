"""Telemetry API: chart series per GPU and per instance, latest state, GPU events and
operators' host tokens."""

from django.db import transaction
from django.db.models import F
from django.http import JsonResponse
from django.urls import path
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api.mixins import TeamScopedViewSetMixin
from console.policy import may
from instances.models import Gpu, GpuSlice, Instance

from . import figures, health_api, queries, services
from .models import GpuEvent, GpuLatest, HostToken
from .serializers import (
    GpuEventSerializer,
    GpuLatestSerializer,
    HostTokenSerializer,
    NewHostTokenSerializer,
)

WINDOW_PARAMETERS = [
    OpenApiParameter("metric", str, many=True, description=f"repeatable; one of {', '.join(queries.CHARTABLE)}"),
    OpenApiParameter("start", str, description="ISO 8601 or Unix seconds; default end - 1 h"),
    OpenApiParameter("end", str, description="ISO 8601 or Unix seconds; default now"),
    OpenApiParameter("points", int, description=f"at most this many points per series (≤ {queries.MAX_POINTS})"),
]


def _window(request) -> queries.Window:
    try:
        return queries.parse_window(request.query_params)
    except queries.QueryError as exc:
        raise ValidationError({exc.param: [exc.message]}) from None


class GpuMetricsView(APIView):
    """Series of one GPU or MIG/vGPU slice: the tier follows the range (raw ≤ 6 h,
    1-minute ≤ 7 days, else 1-hour), at most 2,000 min/max-preserving points."""

    @extend_schema(parameters=WINDOW_PARAMETERS, responses=OpenApiTypes.OBJECT)
    def get(self, request, uuid):
        window = _window(request)
        gpu = Gpu.objects.for_user(request.user).filter(uuid=uuid).select_related("model").first()
        if gpu is not None:
            gpu_id, slice_id, profile = gpu.pk, None, None
        else:
            piece = (
                GpuSlice.objects.for_user(request.user).filter(uuid=uuid).select_related("gpu__model", "profile").first()
            )
            if piece is None:
                raise NotFound("No such GPU.")
            gpu, gpu_id, slice_id, profile = piece.gpu, piece.gpu_id, piece.pk, piece.profile
        # Each reading is estimated at its holder's precision of the time (bf16 when free).
        timeline = queries.device_timeline(gpu.model, profile, gpu_id=gpu_id, slice_id=slice_id, window=window)
        tier, series = queries.gpu_series(request.user, window, gpu_id=gpu_id, slice_id=slice_id, basis=timeline)
        basis = queries.basis_at_end(timeline, window)
        return Response(
            {"gpu": uuid, "tier": tier, "start": queries.iso(window.start), "end": queries.iso(window.end),
             "series": series, "tflops_basis": basis.as_dict() if basis else None,
             "tflops_bases": queries.bases_text(timeline, window)}
        )


class InstanceMetricsView(APIView):
    """Series of every GPU or slice an instance held in the range, keyed by UUID."""

    @extend_schema(parameters=WINDOW_PARAMETERS, responses=OpenApiTypes.OBJECT)
    def get(self, request, pk):
        window = _window(request)
        instance = Instance.objects.for_user(request.user).filter(pk=pk).first()
        if instance is None:
            raise NotFound("No such instance.")
        bases = queries.instance_bases(instance)
        tier, gpus = queries.instance_series(request.user, window, instance_id=instance.pk, bases=bases)
        at_end = {uuid: queries.basis_at_end(timeline, window) for uuid, timeline in bases.items()}
        return Response(
            {"instance": instance.pk, "tier": tier, "start": queries.iso(window.start),
             "end": queries.iso(window.end), "gpus": gpus, "precision": instance.precision,
             "tflops_basis": {uuid: b.as_dict() if b else None for uuid, b in at_end.items()},
             "tflops_bases": {uuid: queries.bases_text(timeline, window) for uuid, timeline in bases.items()}}
        )


class GpuLatestViewSet(TeamScopedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    """The latest reading of each GPU and slice (``stale`` when its agent went quiet)."""

    queryset = GpuLatest.objects.select_related("host", "gpu").annotate(job=F("instance__job_run__job__name"))
    serializer_class = GpuLatestSerializer
    lookup_field = "uuid"
    lookup_value_regex = "[^/]+"
    filterset_fields = ["host__name", "instance", "team"]

    def get_serializer_context(self):
        return super().get_serializer_context() | {"now": timezone.now()}


class GpuEventViewSet(TeamScopedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    """XID errors, lost and returned GPUs, registrations and inventory mismatches."""

    queryset = GpuEvent.objects.select_related("host")
    serializer_class = GpuEventSerializer
    filterset_fields = ["kind", "uuid", "host__name", "instance", "team"]
    ordering_fields = ["time"]

class HostTokenViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Agent tokens (operators). The raw token is in the creation answer only;
    revoke with POST …/{id}/revoke/."""

    policy_action = "fleet.operate"

    queryset = HostToken.objects.select_related("host", "created_by")
    serializer_class = HostTokenSerializer
    filterset_fields = ["host__name", "host"]

    def get_serializer_class(self):
        return NewHostTokenSerializer if self.action == "create" else HostTokenSerializer

    @extend_schema(request=HostTokenSerializer, responses={201: NewHostTokenSerializer})
    def create(self, request, *args, **kwargs):
        form = HostTokenSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with transaction.atomic():
            token, raw = services.create_host_token(
                actor=request.user, host=form.validated_data["host"], name=form.validated_data["name"]
            )
        body = NewHostTokenSerializer(token).data | {"token": raw}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=HostTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = services.revoke_host_token(actor=request.user, token=self.get_object())
        return Response(HostTokenSerializer(token).data)

    @extend_schema(request=None, responses={201: NewHostTokenSerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        """A new token for the host; this one keeps working for the rotation grace period
        (``HOST_TOKEN_ROTATION_GRACE_S``), then expires."""
        try:
            token, raw = services.rotate_host_token(actor=request.user, token=self.get_object())
        except services.TokenError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(NewHostTokenSerializer(token).data | {"token": raw}, status=status.HTTP_201_CREATED)


class OverviewView(APIView):
    """The overview's figures (the same functions the overview page reads): for an
    operator the whole fleet with capacity per model, for anyone else the instances of
    their teams that hold GPUs."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        now = timezone.now()
        if may(request.user, "fleet.view"):
            models = figures.capacity()
            return Response({"scope": "fleet", **figures.fleet_totals(now, models=models), "capacity": models})
        return Response({"scope": "teams", **figures.team_totals(request.user, now)})


routes = [
    ("gpu-latest", GpuLatestViewSet, "gpu-latest"),
    ("gpu-events", GpuEventViewSet, "gpu-event"),
    ("host-tokens", HostTokenViewSet, "host-token"),
]

def agent_allocations(request):
    """GET with ``Authorization: Bearer <host token>``: what the host's devices are held
    for now (``services.host_allocations``). For the simulated agent; 401 without a live
    host token, 405 for anything but GET."""
    if request.method != "GET":
        return JsonResponse({"detail": "Only GET is allowed."}, status=405)
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    token = services.authenticate_agent(raw.strip()) if scheme.lower() == "bearer" else None
    if token is None:
        return JsonResponse({"detail": "A live host token is required (Authorization: Bearer …)."}, status=401)
    return JsonResponse(services.host_allocations(token.host))


urlpatterns = [
    path("agent/allocations/", agent_allocations, name="agent-allocations"),
    path("overview/", OverviewView.as_view(), name="overview-figures"),
    path("gpus/<str:uuid>/metrics/", GpuMetricsView.as_view(), name="gpu-metrics"),
    path("instances/<int:pk>/metrics/", InstanceMetricsView.as_view(), name="instance-metrics"),
    *health_api.urlpatterns,
]
