"""Host health and diagnostics over the API (operators only; tenants get 403):
GET /api/v1/hosts/{id}/health/, GET and POST /api/v1/hosts/{id}/diagnostics/,
GET /api/v1/hosts/{id}/diagnostics/{bundle}/download/; the agent uploads a bundle with
POST /api/v1/agent/diagnostics/{bundle}/ (its host token and the request's key)."""

from __future__ import annotations

from django.http import FileResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from instances.models import Gpu, Host

from . import diagnostics, services, verdicts
from .models import DiagnosticsBundle


def bundle_data(bundle: DiagnosticsBundle) -> dict:
    return {"id": bundle.pk, "host": bundle.host_id, "state": bundle.state, "requested_at": bundle.requested_at,
            "requested_by": bundle.requested_by.get_username() if bundle.requested_by else None,
            "stored_at": bundle.stored_at, "size": bundle.size, "sha256": bundle.sha256, "error": bundle.error,
            "items": [{k: i.get(k) for k in ("name", "status", "bytes", "note")}
                      for i in (bundle.manifest or {}).get("items", []) if isinstance(i, dict)]}


def host_health(host: Host) -> dict:
    gpus = list(Gpu.objects.filter(host=host).order_by("index"))
    rows = verdicts.gpu_verdicts(g.pk for g in gpus)
    verdict = verdicts.host_verdict_of(gpus, rows)
    return {"host": host.name, **verdict.as_dict(), "cordoned": host.cordoned_at is not None,
            "cordon_reason": host.cordon_reason, "gpus": [
                {"index": g.index, "uuid": g.uuid, "state": rows[g.pk].state if g.pk in rows else "healthy",
                 "reasons": rows[g.pk].reasons if g.pk in rows else [],
                 "facts": rows[g.pk].facts if g.pk in rows else {},
                 "cordoned": g.cordoned_at is not None, "cordon_reason": g.cordon_reason} for g in gpus]}


class HostHealthView(APIView):
    policy_action = "fleet.view"

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, pk: int):
        return Response(host_health(get_object_or_404(Host, pk=pk)))


class HostDiagnosticsView(APIView):
    # reading and collecting bundles are both the operators'
    policy_action = "fleet.view"

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, pk: int):
        host = get_object_or_404(Host, pk=pk)
        bundles = DiagnosticsBundle.objects.filter(host=host).select_related("requested_by")[:100]
        return Response({"host": host.name, "results": [bundle_data(b) for b in bundles]})

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request, pk: int):
        host = get_object_or_404(Host, pk=pk)
        try:
            bundle = diagnostics.request_bundle(actor=request.user, host=host)
        except diagnostics.DiagnosticsError as exc:  # one on its way already: a conflict, not bad input
            return Response({"detail": str(exc), "code": exc.code}, status=status.HTTP_409_CONFLICT)
        return Response(bundle_data(bundle), status=status.HTTP_202_ACCEPTED)


class BundleDownloadView(APIView):
    policy_action = "fleet.view"

    @extend_schema(responses={(200, "application/gzip"): OpenApiTypes.BINARY})
    def get(self, request, pk: int, bundle: int):
        # the host first: an id past the column's range is a 404 there (a foreign key's
        # lookup has no such guard, and SQLite refuses the number)
        host = get_object_or_404(Host, pk=pk)
        found = get_object_or_404(DiagnosticsBundle.objects.select_related("host"), pk=bundle, host=host)
        try:
            handle = diagnostics.open_bundle(actor=request.user, bundle=found)
        except diagnostics.DiagnosticsError as exc:
            return Response({"detail": str(exc), "code": exc.code}, status=status.HTTP_400_BAD_REQUEST)
        name = f"diagnostics-{found.host.name}-{found.pk}.tar.gz"
        return FileResponse(handle, as_attachment=True, filename=name, content_type="application/gzip")


@csrf_exempt
def agent_upload(request, bundle: int):
    """POST by the agent: the bundle's bytes, ``Authorization: Bearer <host token>`` and
    ``X-Diagnostics-Key``. 401 without a live host token, 400 with a named code otherwise."""
    if request.method != "POST":
        return JsonResponse({"detail": "Only POST is allowed."}, status=405)
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    token = services.authenticate_agent(raw.strip()) if scheme.lower() == "bearer" else None
    if token is None:
        return JsonResponse({"detail": "A live host token is required (Authorization: Bearer …)."}, status=401)
    # Read from the stream: request.body stops at DATA_UPLOAD_MAX_MEMORY_SIZE, far below a bundle.
    data = request.read(diagnostics.max_bytes() + 1)
    try:
        stored = diagnostics.receive_upload(host=token.host, bundle_id=bundle,
                                           key=request.headers.get("X-Diagnostics-Key", ""), data=data)
    except diagnostics.DiagnosticsError as exc:
        return JsonResponse({"detail": str(exc), "code": exc.code}, status=400)
    return JsonResponse({"id": stored.pk, "size": stored.size, "sha256": stored.sha256}, status=201)


urlpatterns = [
    path("hosts/<int:pk>/health/", HostHealthView.as_view(), name="host-health"),
    path("hosts/<int:pk>/diagnostics/", HostDiagnosticsView.as_view(), name="host-diagnostics"),
    path("hosts/<int:pk>/diagnostics/<int:bundle>/download/", BundleDownloadView.as_view(),
         name="host-diagnostics-download"),
    path("agent/diagnostics/<int:bundle>/", agent_upload, name="agent-diagnostics-upload"),
]
