from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from console.api.mixins import TeamScopedViewSetMixin

from . import costs, services
from .models import ScalingGroup
from .serializers import QueueDepthSerializer, ScalingDecisionSerializer, ScalingGroupSerializer

SETTINGS = services.SETTINGS


class ScalingGroupViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, mixins.UpdateModelMixin,
                          mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Elastic scaling groups: instances of one template kept at
    clamp(ceil(queue depth / target per instance), min, max). Push the queue depth to
    ``metrics/``; every decision is listed at ``decisions/``. Deleting a group
    terminates its instances; its costs stay in the cost explorer under its name."""

    queryset = services.with_running(ScalingGroup.objects.live().select_related("team", "gpu_model", "image"))
    serializer_class = ScalingGroupSerializer
    filterset_fields = ["team"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        rows = page if page is not None else list(self.filter_queryset(self.get_queryset()))
        context = {**self.get_serializer_context(), "costs": costs.group_costs(rows, now=timezone.now())}
        data = self.get_serializer_class()(rows, many=True, context=context).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("team.write", data["team"], "create scaling groups")
        serializer.instance = services.create_group(
            actor=self.request.user, team=data["team"], name=data["name"],
            **{field: data[field] for field in (*SETTINGS, *services.NETWORK) if field in data},
        )

    def perform_update(self, serializer):
        group = serializer.instance
        self.require("team.write", group, "change scaling groups")
        changes = {field: value for field, value in serializer.validated_data.items()
                   if field in (*SETTINGS, *services.NETWORK)}
        serializer.instance = services.update_group(actor=self.request.user, group=group, **changes)

    def perform_destroy(self, instance):
        self.require("team.write", instance, "delete scaling groups")
        services.delete_group(actor=self.request.user, group=instance)

    @extend_schema(request=QueueDepthSerializer, responses=ScalingGroupSerializer)
    @action(detail=True, methods=["post"])
    def metrics(self, request, pk=None):
        """Push the group's queue depth, ``{"queue_depth": N}`` (an API token needs the
        ``write`` scope). The group is evaluated at once, and every 30 s after."""
        group = self.get_object()
        self.require("team.write", group, "push metrics of scaling groups")
        if not isinstance(request.data, dict) or "queue_depth" not in request.data:
            raise ValidationError({"queue_depth": "Send {\"queue_depth\": N}, N queued items."})
        services.push_queue_depth(group=group, queue_depth=request.data["queue_depth"])
        from . import tasks

        transaction.on_commit(lambda: tasks.evaluate_group.delay(group.pk))
        return Response(self.get_serializer(group).data)

    @extend_schema(responses=ScalingDecisionSerializer(many=True))
    @action(detail=True, methods=["get"])
    def decisions(self, request, pk=None):
        """The group's decisions, newest first: what it saw, wanted, did and why."""
        group = self.get_object()
        page = self.paginate_queryset(group.decisions.all())
        return self.get_paginated_response(ScalingDecisionSerializer(page, many=True).data)


routes = [
    ("scaling-groups", ScalingGroupViewSet, "scaling-group"),
]
