from datetime import timedelta

from django.db.models import Count, F, Prefetch, Q
from django.http import Http404
from django.urls import path
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api.mixins import TeamScopedViewSetMixin
from console.models import Team
from console.policy import may

from . import (
    catalog,
    cordon_api,
    images,
    inventory,
    launch_options,
    lifecycle,
    placement,
    preemption,
)
from .models import (
    Gpu,
    GpuModel,
    GpuSlice,
    Host,
    Image,
    Instance,
    LifecycleEvent,
    PreemptionNotice,
    Region,
    SliceProfile,
    gpu_free_q,
)
from .serializers import (
    DefaultImageRequest,
    GpuModelSerializer,
    GpuSerializer,
    HostSerializer,
    ImageSerializer,
    InstanceDetailSerializer,
    InstanceSerializer,
    LaunchQuoteQuery,
    PreemptionNoticeSerializer,
    RegionSerializer,
    SliceProfileSerializer,
)


class RegionViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Region.objects.all()
    serializer_class = RegionSerializer
    pagination_class = None


class GpuModelViewSet(viewsets.ReadOnlyModelViewSet):
    """GPU models on offer, with their MIG/vGPU slice profiles at /api/v1/slice-profiles/."""

    queryset = GpuModel.objects.all()
    serializer_class = GpuModelSerializer
    pagination_class = None


class SliceProfileViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = SliceProfile.objects.select_related("gpu_model")
    serializer_class = SliceProfileSerializer
    filterset_fields = ["kind", "gpu_model__name"]
    pagination_class = None


class HostViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Fleet hosts (operators). PATCH state to drain a host or mark it down."""

    policy_action = "fleet.view"

    queryset = Host.objects.select_related("region").annotate(
        gpu_count=Count("gpus"), gpus_free=Count("gpus", filter=gpu_free_q("gpus__")),
        # monitoring keeps each GPU's health verdict (GpuHealth, related name "health")
        gpus_failed=Count("gpus", filter=Q(gpus__health__state="failed")),
        gpus_degraded=Count("gpus", filter=Q(gpus__health__state="degraded")),
        gpus_cordoned=Count("gpus", filter=Q(gpus__cordoned_at__isnull=False)),
    ).order_by("region__name", "name")
    serializer_class = HostSerializer
    filterset_fields = ["region__name", "kind", "state"]
    ordering_fields = ["name", "state"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = inventory.register_host(
            actor=self.request.user, name=data["name"], region=data["region"], kind=data["kind"],
            nvlink_group=data.get("nvlink_group", ""),
        )
        serializer.instance.gpu_count = serializer.instance.gpus_free = 0
        serializer.instance.gpus_failed = serializer.instance.gpus_degraded = serializer.instance.gpus_cordoned = 0

    def perform_update(self, serializer):
        host = inventory.update_host(actor=self.request.user, host=serializer.instance, **serializer.validated_data)
        serializer.instance = self.get_queryset().get(pk=host.pk)


class GpuViewSet(TeamScopedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    """GPUs: operators see the fleet, teams the GPUs their instances hold."""

    queryset = Gpu.objects.select_related("host", "model").annotate(job=F("instance__job_run__job__name")).prefetch_related(
        Prefetch("slices", queryset=GpuSlice.objects.select_related("profile"))
    )
    serializer_class = GpuSerializer
    lookup_field = "uuid"
    lookup_value_regex = "[^/]+"
    filterset_fields = ["host__name", "model__name", "instance"]


class ImageViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """The image catalog: public images and your teams' private ones. A team adds its own
    by registry reference; operators add public ones. Retired images stay listed."""

    queryset = Image.objects.select_related("team").prefetch_related("gpu_models", "default_for")
    serializer_class = ImageSerializer
    filterset_fields = {"gpu_models__name": ["exact"], "visibility": ["exact"], "team": ["exact"],
                        "retired_at": ["isnull"]}
    ordering_fields = ["name", "created_at", "size_bytes"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        team = data.get("team")
        if team is None and not may(self.request.user, "fleet.operate"):
            self.permission_denied(self.request, message="Only operators add public images; name your team.")
        if team is not None:
            self.require("team.write", team, "add images")
        serializer.instance = images.create_image(
            actor=self.request.user, team=team, name=data["name"], reference=data["reference"],
            gpu_models=data["gpu_models"], framework=data.get("framework", ""),
            framework_version=data.get("framework_version", ""), cuda_version=data.get("cuda_version", ""),
            size_bytes=data.get("size_bytes"),
        )

    @extend_schema(request=None, responses=ImageSerializer)
    @action(detail=True, methods=["post"])
    def retire(self, request, pk=None):
        """Stops new launches of the image; running instances keep it."""
        image = self.get_object()
        if image.team_id is None and not may(request.user, "image.manage", image):
            self.permission_denied(request, message="Only operators retire public images.")
        if image.team_id is not None:
            self.require("team.write", image, "retire images")
        images.retire_image(actor=request.user, image=image)
        return Response(ImageSerializer(self.get_queryset().get(pk=image.pk), context={"request": request}).data)

    @extend_schema(request=DefaultImageRequest, responses=ImageSerializer)
    @action(detail=True, methods=["post"], url_path="make-default")
    def make_default(self, request, pk=None):
        """Operators: launches of the GPU model that name no image boot this one."""
        image = self.get_object()
        if not may(request.user, "fleet.operate"):
            self.permission_denied(request, message="Only operators set a GPU model's default image.")
        body = DefaultImageRequest(data=request.data)
        body.is_valid(raise_exception=True)
        images.set_default(actor=request.user, image=image, gpu_model=body.validated_data["gpu_model"])
        return Response(ImageSerializer(self.get_queryset().get(pk=image.pk), context={"request": request}).data)


class InstanceViewSet(
    TeamScopedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet
):
    """Launch, list and act on your teams' instances."""

    queryset = Instance.objects.select_related(
        "team", "gpu_model", "slice_profile__gpu_model", "host", "image", "interface").prefetch_related(
        Prefetch("gpus", queryset=Gpu.objects.only("uuid", "instance_id"))
    )
    serializer_class = InstanceSerializer
    filterset_fields = ["team", "state", "pricing_model", "gpu_model__name", "host__name"]
    ordering_fields = ["created_at", "name", "state"]

    def get_queryset(self):
        qs = super().get_queryset()
        if self.action == "retrieve":
            qs = qs.prefetch_related(Prefetch("events", queryset=LifecycleEvent.objects.select_related("host")))
        return qs

    def get_serializer_class(self):
        return InstanceDetailSerializer if self.action == "retrieve" else InstanceSerializer

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("team.write", data["team"], "launch instances")
        with launch_options.launching(actor=self.request.user, team=data["team"], data=data):
            serializer.instance = lifecycle.launch_instance(
                actor=self.request.user,
                team=data["team"],
                name=data["name"],
                gpu_model=data["gpu_model"],
                gpu_count=data["gpu_count"],
                pricing_model=data["pricing_model"],
                slice_profile=data["slice_profile"],
                region=data.get("region"),
                labels=data.get("labels"),
                image=data.get("image"),
                max_price=data.get("max_price"),
            )

    def _act(self, request, verb, what):
        instance = self.get_object()
        self.require("team.write", instance, what)
        verb(actor=request.user, instance=instance)
        fresh = self.get_queryset().get(pk=instance.pk)
        return Response(InstanceSerializer(fresh, context={"request": request}).data, status=status.HTTP_200_OK)

    @extend_schema(request=None, responses=InstanceSerializer)
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        return self._act(request, lifecycle.start_instance, "start instances")

    @extend_schema(request=None, responses=InstanceSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        return self._act(request, lifecycle.stop_instance, "stop instances")

    @extend_schema(request=None, responses=InstanceSerializer)
    @action(detail=True, methods=["post"])
    def terminate(self, request, pk=None):
        return self._act(request, lifecycle.terminate_instance, "terminate instances")

    @extend_schema(request=None, responses=InstanceSerializer)
    @action(detail=True, methods=["post"], url_path="force-stop")
    def force_stop(self, request, pk=None):
        """Operators: end a ``stopping`` the host never confirmed (billing stopped at the
        grace, STOPPING_GRACE_SECONDS)."""
        instance = self.get_object()
        if not may(request.user, "fleet.operate"):
            self.permission_denied(request, message="Only operators can force a stop.")
        lifecycle.force_stop(actor=request.user, instance=instance)
        fresh = self.get_queryset().get(pk=instance.pk)
        return Response(InstanceSerializer(fresh, context={"request": request}).data, status=status.HTTP_200_OK)


class PreemptionNoticeViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Spot preemption notices. Operators issue one; the instance is preempted when the
    notice (default 120 s) runs out."""

    queryset = PreemptionNotice.objects.select_related("instance")
    serializer_class = PreemptionNoticeSerializer
    filterset_fields = ["team", "instance", "status"]

    def create(self, request, *args, **kwargs):
        # Refuse before validating, so an outsider learns nothing from the errors.
        if not may(request.user, "fleet.operate"):
            self.permission_denied(request, message="Only operators can preempt instances.")
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = preemption.issue_preemption_notice(
            actor=self.request.user, instance=data["instance"], notice=timedelta(seconds=data["notice_seconds"]),
            reason=data.get("reason", ""),
        )


def _price(value) -> str | None:
    """An hourly price as text: its own decimals, at least 2 (1.794, 8.00)."""
    return None if value is None else preemption.price_text(value)


class LaunchQuoteView(APIView):
    """What a launch would cost per hour now and whether it fits: the price for the chosen
    GPU model (or slice), pricing model and count, one line saying how it is made, the
    free capacity (in all, and the most one instance can get: ``free_on_one_host``, on one
    host and in one NVLink group where the host has groups), and the
    SKU's spot price now, its range over the last days and the saving against on-demand."""

    @extend_schema(parameters=[LaunchQuoteQuery], responses=OpenApiTypes.OBJECT)
    def get(self, request):
        query = LaunchQuoteQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        model, profile = data["gpu_model"], data.get("slice_profile")
        team_id = data.get("team")
        if team_id is not None and not Team.objects.for_user(request.user).filter(pk=team_id).exists():
            raise Http404("No such team, or not yours.")
        sku = profile.sku if profile is not None else model.name
        quote = catalog.quote(sku=sku, pricing_model=data["pricing_model"], count=data["gpu_count"], team_id=team_id,
                              at=timezone.now())
        free, on_one_host = placement.free_capacity(gpu_model=model, slice_profile=profile)
        return Response({
            "sku": sku, "pricing_model": data["pricing_model"], "gpu_count": data["gpu_count"],
            "price_per_hour": _price(getattr(quote, "price_per_hour", None)),
            "price_per_gpu_hour": _price(getattr(quote, "per_gpu_hour", None)),
            "note": "" if quote is None else quote.note,
            "free": free, "free_on_one_host": on_one_host, "fits": on_one_host >= data["gpu_count"],
            "spot": _spot(catalog.spot_outlook(sku=sku, at=timezone.now())),
        })


def _spot(outlook) -> dict | None:
    """The spot block of a launch quote: price now, recent low and high, the saving
    against on-demand (percent) and the chart of the recent range."""
    if outlook is None:
        return None
    return {"price_per_gpu_hour": _price(outlook.price), "low": _price(outlook.low), "high": _price(outlook.high),
            "days": outlook.days, "on_demand_per_gpu_hour": _price(outlook.on_demand),
            "saving_pct": outlook.saving_pct, "figure": outlook.figure}


routes = [
    ("regions", RegionViewSet, "region"),
    ("gpu-models", GpuModelViewSet, "gpu-model"),
    ("slice-profiles", SliceProfileViewSet, "slice-profile"),
    ("hosts", HostViewSet, "host"),
    ("gpus", GpuViewSet, "gpu"),
    ("images", ImageViewSet, "image"),
    ("instances", InstanceViewSet, "instance"),
    ("preemption-notices", PreemptionNoticeViewSet, "preemption-notice"),
]

urlpatterns = [
    path("launch-quote/", LaunchQuoteView.as_view(), name="launch-quote"),
    *cordon_api.urlpatterns,
]
