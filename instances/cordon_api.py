"""Cordon and drain over the API (operators): POST /api/v1/hosts/{id}/cordon/,
/uncordon/ and /drain/; POST /api/v1/gpus/{uuid}/cordon/ and /uncordon/. A body may
carry ``reason`` (and, for a drain, ``notice_seconds``)."""

from datetime import timedelta

from django.shortcuts import get_object_or_404
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from . import cordon, preemption
from .models import Gpu, Host


class CordonRequest(serializers.Serializer):
    reason = serializers.CharField(max_length=cordon.MAX_REASON, required=False, allow_blank=True, default="")
    notice_seconds = serializers.IntegerField(min_value=0, max_value=3600, required=False,
                                              default=int(preemption.DEFAULT_NOTICE.total_seconds()))


def _instances(items) -> list[dict]:
    return [{"id": i.pk, "name": i.name, "team": i.team_id, "pricing_model": i.pricing_model, "state": i.state}
            for i in items]


def _cordon(target) -> dict:
    return {"cordoned": target.cordoned_at is not None, "cordoned_at": target.cordoned_at,
            "cordon_reason": target.cordon_reason}


class _CordonView(APIView):
    policy_action = "fleet.operate"
    verb = ""

    def _body(self, request) -> dict:
        body = CordonRequest(data=request.data or {})
        body.is_valid(raise_exception=True)
        return body.validated_data


class HostCordonView(_CordonView):
    @extend_schema(request=CordonRequest, responses=OpenApiTypes.OBJECT)
    def post(self, request, pk: int):
        host = get_object_or_404(Host, pk=pk)
        data = self._body(request)
        if self.verb == "uncordon":
            host = cordon.uncordon_host(actor=request.user, host=host)
        elif self.verb == "cordon":
            host = cordon.cordon_host(actor=request.user, host=host, reason=data["reason"])
        else:
            drain = cordon.drain_host(actor=request.user, host=host, reason=data["reason"],
                                      notice=timedelta(seconds=data["notice_seconds"]))
            return Response({"host": drain.host.name, **_cordon(drain.host), "preempted": _instances(drain.preempted),
                             "already_noticed": _instances(drain.already_noticed),
                             "to_move": _instances(drain.to_move)})
        return Response({"host": host.name, **_cordon(host)})


class GpuCordonView(_CordonView):
    @extend_schema(request=CordonRequest, responses=OpenApiTypes.OBJECT)
    def post(self, request, uuid: str):
        gpu = get_object_or_404(Gpu, uuid=uuid)
        if self.verb == "uncordon":
            gpu = cordon.uncordon_gpu(actor=request.user, gpu=gpu)
        else:
            gpu = cordon.cordon_gpu(actor=request.user, gpu=gpu, reason=self._body(request)["reason"])
        return Response({"gpu": gpu.uuid, "host": gpu.host.name, **_cordon(gpu)})


urlpatterns = [
    path("hosts/<int:pk>/cordon/", HostCordonView.as_view(verb="cordon"), name="host-cordon"),
    path("hosts/<int:pk>/uncordon/", HostCordonView.as_view(verb="uncordon"), name="host-uncordon"),
    path("hosts/<int:pk>/drain/", HostCordonView.as_view(verb="drain"), name="host-drain"),
    path("gpus/<str:uuid>/cordon/", GpuCordonView.as_view(verb="cordon"), name="gpu-cordon"),
    path("gpus/<str:uuid>/uncordon/", GpuCordonView.as_view(verb="uncordon"), name="gpu-uncordon"),
]
