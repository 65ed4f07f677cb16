"""/api/v1/audit/: events (filtered, cursor-paginated), streamed exports, verification."""

from django.conf import settings
from django.http import StreamingHttpResponse
from django.urls import path
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers, viewsets
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle
from rest_framework.views import APIView

from console.api.mixins import TeamScopedViewSetMixin
from console.api.permissions import TokenScope
from console.policy import Policy
from console.tenancy import AUDIT_ROLES
from console.validators import whole_number

from . import access, keys, proofs, verification
from .export import FORMATS, async_chunks
from .filters import AuditEventFilter, filter_values
from .models import AuditEvent
from .verification import parse_bound


class AuditEventSerializer(serializers.ModelSerializer):
    team_name = serializers.CharField(source="team.name", default=None, read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = [
            "seq", "time", "actor_type", "actor_id", "actor_name", "team", "team_name", "action",
            "target_type", "target_id", "outcome", "source_ip", "user_agent", "request_id", "details",
            "prev_hash", "hash",
        ]  # fmt: skip


class NewestFirst(CursorPagination):
    ordering = "-seq"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


def _filtered(request, queryset):
    """The audit filters applied to ``queryset``; bad values answer 400 naming the field,
    another team answers 404."""
    filterset = AuditEventFilter(request.query_params, queryset=queryset)
    if not filterset.is_valid():
        raise exceptions.ValidationError(filterset.errors)
    access.check_team(request.user, filterset.form.cleaned_data.get("team"))
    return filterset


class AuditEventViewSet(TeamScopedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    """Audit events you may see: your teams' (admins, auditors), all (operators), and
    your own sign-ins. Filters: since, until, actor, actor_type, team, action (``x.*``
    for a prefix), outcome, target_type, target_id, q (free text in details)."""

    queryset = AuditEvent.objects.filter(seq__isnull=False).select_related("team")  # sealed
    serializer_class = AuditEventSerializer
    permission_classes = [IsAuthenticated, TokenScope, Policy]
    policy_action = "audit.read"
    read_roles = AUDIT_ROLES
    filter_backends = [DjangoFilterBackend]
    filterset_class = AuditEventFilter
    pagination_class = NewestFirst
    lookup_field = "seq"
    lookup_value_regex = "[0-9]+"

    def filter_queryset(self, queryset):
        if self.action == "list":
            _filtered(self.request, queryset)
        return super().filter_queryset(queryset)


class _FormatIsOurs(DefaultContentNegotiation):
    """``?format=`` names the export format here, not a DRF renderer."""

    class settings:
        URL_FORMAT_OVERRIDE = None


class ExportView(APIView):
    """Stream the filtered events as CSV or JSON Lines, ending with the signed checkpoint
    that covers them. The export is itself audited."""

    permission_classes = [IsAuthenticated, TokenScope, Policy]
    policy_action = "audit.read"
    token_scope = "audit:export"
    content_negotiation_class = _FormatIsOurs

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=list(FORMATS), required=True)],
        responses={
            (200, "text/csv"): OpenApiTypes.BINARY,
            (200, "application/x-ndjson"): OpenApiTypes.BINARY,
        },
    )
    def get(self, request):
        fmt = request.query_params.get("format", "")
        if fmt not in FORMATS:
            raise exceptions.ValidationError({"format": [f"Choose one of: {', '.join(FORMATS)}."]})
        return stream_export(request, fmt)


def stream_export(request, fmt: str) -> StreamingHttpResponse:
    filterset = _filtered(request, access.visible_events(request.user))
    team_id = filterset.form.cleaned_data.get("team")
    export = proofs.prepare_export(
        actor=request.user,
        queryset=filterset.qs,
        fmt=fmt,
        filters=filter_values(filterset.form),
        team=access.export_team(request.user, team_id),
    )
    raw = getattr(request, "_request", request)
    chunks = async_chunks(export.chunks) if hasattr(raw, "scope") else export.chunks()
    response = StreamingHttpResponse(chunks, content_type=FORMATS[fmt])
    response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
    response["X-Audit-Event-Count"] = str(export.count)
    response["X-Audit-Through-Seq"] = str(export.through_seq)
    response["Cache-Control"] = "no-store"
    return response


class VerifyThrottle(UserRateThrottle):
    scope = "audit_verify"
    rate = getattr(settings, "AUDIT_VERIFY_RATE", "10/min")


class VerifyView(APIView):
    """Walk the hash chain and the signed checkpoints (optionally ``from``/``to``: a
    sequence number or an ISO date/time) and report each segment. Audited."""

    permission_classes = [IsAuthenticated, TokenScope, Policy]
    policy_action = "audit.read"
    throttle_classes = [VerifyThrottle]

    @extend_schema(
        parameters=[OpenApiParameter("from", str), OpenApiParameter("to", str)],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        bounds = {}
        for name in ("from", "to"):
            value = request.query_params.get(name)
            if value:
                try:
                    bounds[name] = parse_bound(value, name)
                except ValueError as exc:
                    raise exceptions.ValidationError({name: [str(exc)]}) from None
        run = verification.run_verification(
            actor=request.user, start=bounds.get("from"), end=bounds.get("to")
        )
        return Response(verification_body(run, request.user))


def verification_body(run, user=None) -> dict:
    """An operator sees the whole report; a team admin or auditor sees whether the log
    verifies and what concerns the events they may see, nothing about other teams."""
    if user is not None and not access.reads_whole_log(user):
        return _team_view(run, user)
    return {
        "valid": run.valid,
        "checked": run.checked,
        "first_seq": run.first_seq,
        "last_seq": run.last_seq,
        "first_broken_seq": run.first_broken_seq,
        "reason": run.reason,
        "seconds": round(run.seconds, 3),
        "segments": run.segments,
        "verified_at": run.started_at,
    }


def _team_view(run, user) -> dict:
    visible = access.visible_events(user)
    if run.first_seq is not None:
        visible = visible.filter(seq__gte=run.first_seq, seq__lte=run.last_seq)
    seqs = visible.order_by("seq").values_list("seq", flat=True)
    broken = run.first_broken_seq
    mine = access.broken_is_theirs(user, run)
    reason = (
        run.reason
        if mine
        else ("a record of another team does not verify" if not run.valid else "")
    )
    return {
        "valid": run.valid, "checked": seqs.count(), "first_seq": seqs.first(), "last_seq": seqs.last(),
        "first_broken_seq": broken if mine else None, "reason": reason, "seconds": round(run.seconds, 3),
        "verified_at": run.started_at,
    }  # fmt: skip


class PublicKeyView(APIView):
    """The Ed25519 public key that signs the audit log's tree heads (PEM and fingerprint),
    and every key that signed before it, with the time each was in service. Public: an
    auditor fetches it once and verifies exports offline with it."""

    permission_classes = [AllowAny]

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        current = keys.signer()
        listed = [k.as_dict() for k in keys.public_keys().values()]
        return Response(
            {"algorithm": "Ed25519", "fingerprint": current.fingerprint,
             "public_key_pem": current.public_pem, "keys": listed}
        )  # fmt: skip


class ConsistencyView(APIView):
    """A consistency proof (RFC 6962) that the signed tree head of size ``second``
    (default: the newest) extends the one of size ``first`` unchanged; the answer, saved
    as a file, is checked with ``python -m audit.offline_verify --consistency``."""

    permission_classes = [IsAuthenticated, Policy]
    policy_action = "audit.read"

    @extend_schema(
        parameters=[OpenApiParameter("first", int, required=True), OpenApiParameter("second", int)],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        sizes = {}
        for name in ("first", "second"):
            raw = request.query_params.get(name, "")
            sizes[name] = whole_number(raw) if raw else None
            if raw and sizes[name] is None:
                raise exceptions.ValidationError({name: ["A tree size (a whole number)."]})
        if sizes["first"] is None:
            raise exceptions.ValidationError({"first": ["This parameter is required."]})
        try:
            body = proofs.consistency(first=sizes["first"], second=sizes["second"])
        except ValueError as exc:
            raise exceptions.ValidationError({"detail": [str(exc)]}) from None
        return Response(body)


routes = [("audit/events", AuditEventViewSet, "audit-event")]

urlpatterns = [
    path("audit/export/", ExportView.as_view(), name="audit-export"),
    path("audit/verify/", VerifyView.as_view(), name="audit-verify"),
    path("audit/public-key/", PublicKeyView.as_view(), name="audit-public-key"),
    path("audit/consistency/", ConsistencyView.as_view(), name="audit-consistency"),
]
