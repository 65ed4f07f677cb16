from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from console.api.mixins import TeamScopedViewSetMixin

from . import submission
from .models import Job
from .serializers import JobDetailSerializer, JobSerializer


class JobViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Queue jobs to run when GPUs are idle. Low priority: idle capacity at the
    idle-capacity price, preempted (with notice) for paying launches and resumed after;
    normal: on-demand, started before low-priority jobs."""

    queryset = Job.objects.select_related("team", "gpu_model", "image").prefetch_related("runs", "events")
    serializer_class = JobSerializer
    filterset_fields = ["team", "state", "priority", "gpu_model__name"]
    ordering_fields = ["submitted_at", "name", "state"]

    def get_serializer_class(self):
        return JobDetailSerializer if self.action == "retrieve" else JobSerializer

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("team.write", data["team"], "submit jobs")
        serializer.instance = submission.submit_job(
            actor=self.request.user, team=data["team"], name=data["name"], command=data["command"],
            gpu_model=data["gpu_model"], gpu_count=data["gpu_count"], priority=data["priority"],
            deadline=data.get("deadline"), image=data.get("image"), subnet=data.get("subnet"),
            security_groups=data.get("security_groups"),
        )

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = self.get_object()
        self.require("team.write", job, "cancel jobs")
        submission.cancel_job(actor=request.user, job=job)
        fresh = self.get_queryset().get(pk=job.pk)
        return Response(JobSerializer(fresh, context={"request": request}).data, status=status.HTTP_200_OK)


routes = [
    ("jobs", JobViewSet, "job"),
]
