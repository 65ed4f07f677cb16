"""/api/v1/ for billing: prices, spot prices, reservations, budgets, invoices, costs,
exports and spot preemption notices. Adapters only: parse, authorise, call a service."""


from django.http import Http404, StreamingHttpResponse
from django.urls import path
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api.mixins import TeamScopedViewSetMixin
from console.models import Team
from console.policy import require
from console.tenancy import AUDIT_ROLES, READ_ROLES
from console.validators import whole_number
from instances.models import Instance

from . import (
    budgets,
    costs,
    exports,
    figures,
    invoices,
    price_changes,
    pricing,
    rates,
    reservations,
)
from .models import (
    Budget,
    BudgetAlert,
    Charge,
    Invoice,
    Price,
    Reservation,
    SpotPrice,
    UnratedUsage,
    currency,
)
from .serializers import (
    AdjustmentSerializer,
    BudgetAlertSerializer,
    BudgetSerializer,
    BudgetUpdateSerializer,
    CostQuerySerializer,
    CostReportSerializer,
    ExportQuerySerializer,
    InvoiceDetailSerializer,
    InvoiceMemoSerializer,
    InvoiceSerializer,
    PriceSerializer,
    ReservationSerializer,
    SpotPriceSerializer,
    UnratedUsageSerializer,
)

# Who sees the bill (invoices, budgets, exports): team admins and auditors.
BILL_ROLES = AUDIT_ROLES


class OperatorCreates(mixins.CreateModelMixin):
    operator_creates = ""

    def create(self, request, *args, **kwargs):
        # Refuse before validating, so an outsider learns nothing from the errors.
        require(request.user, "billing.operate", message=f"Only operators can {self.operator_creates}.")
        return super().create(request, *args, **kwargs)


class PriceViewSet(OperatorCreates, viewsets.ReadOnlyModelViewSet):
    """The price catalog per SKU-hour, effective-dated. Operators add periods; a period
    never starts in the past and never overlaps another of its SKU and kind."""

    queryset = Price.objects.all()
    serializer_class = PriceSerializer
    filterset_fields = ["sku", "kind"]

    operator_creates = "set prices"

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = price_changes.set_price(
            actor=self.request.user, sku=data["sku"], kind=data["kind"], hourly=data["hourly"],
            effective_from=data["effective_from"], effective_until=data.get("effective_until"),
        )


class SpotPriceViewSet(OperatorCreates, viewsets.ReadOnlyModelViewSet):
    """Spot price history, newest first. Operators set a SKU's spot price from now on."""

    queryset = SpotPrice.objects.order_by("-time", "sku")
    serializer_class = SpotPriceSerializer
    filterset_fields = ["sku", "source"]

    operator_creates = "set spot prices"

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = price_changes.set_spot_price(actor=self.request.user, sku=data["sku"], hourly=data["hourly"])


class UnratedUsageViewSet(viewsets.ReadOnlyModelViewSet):
    """Usage metering could not rate (no price in effect): held, not billed, until an
    operator prices the SKU and the days are metered again. Operators only."""

    policy_action = "fleet.view"

    queryset = UnratedUsage.objects.select_related("instance")
    serializer_class = UnratedUsageSerializer
    filterset_fields = ["team", "sku"]


class ReservationViewSet(TeamScopedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Your teams' commitments. Team admins buy one: N GPUs of a model for 1 or 3 years."""

    queryset = Reservation.objects.select_related("gpu_model")
    serializer_class = ReservationSerializer
    filterset_fields = ["team", "gpu_model__name", "term"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("billing.manage", data["team"], "buy reservations")
        serializer.instance = reservations.purchase_reservation(
            actor=self.request.user, team=data["team"], gpu_model=data["gpu_model"], gpu_count=data["gpu_count"],
            term=data["term"], start=data["start"],
        )


class BudgetViewSet(TeamScopedViewSetMixin, viewsets.ModelViewSet):
    """Monthly budgets with alert thresholds (percent) on actual and forecast spend.
    Team admins manage them; auditors read them."""

    queryset = Budget.objects.select_related("team")
    serializer_class = BudgetSerializer
    read_roles = BILL_ROLES
    filterset_fields = ["team", "month"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        self.require("billing.manage", data["team"], "manage budgets")
        serializer.instance = budgets.create_budget(
            actor=self.request.user, team=data["team"], month=data["month"], amount=data["amount"],
            currency_code=data.get("currency"), actual_thresholds=data.get("actual_thresholds", [50, 80, 100]),
            forecast_thresholds=data.get("forecast_thresholds", [100]), recurring=data.get("recurring", False),
        )

    @extend_schema(request=BudgetUpdateSerializer, responses=BudgetSerializer)
    def partial_update(self, request, *args, **kwargs):
        budget = self.get_object()
        self.require("billing.manage", budget, "manage budgets")
        form = BudgetUpdateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        budgets.update_budget(
            actor=request.user, budget=budget, amount=data.get("amount"), currency_code=data.get("currency"),
            actual_thresholds=data.get("actual_thresholds"), forecast_thresholds=data.get("forecast_thresholds"),
            recurring=data.get("recurring"),
        )
        return Response(BudgetSerializer(budget, context=self.get_serializer_context()).data)

    def perform_destroy(self, budget):
        self.require("billing.manage", budget, "manage budgets")
        budgets.delete_budget(actor=self.request.user, budget=budget)


class BudgetAlertViewSet(TeamScopedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    """Budget thresholds crossed, newest first."""

    queryset = BudgetAlert.objects.all()
    serializer_class = BudgetAlertSerializer
    read_roles = BILL_ROLES
    filterset_fields = ["team", "budget", "basis"]


class InvoiceViewSet(TeamScopedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    """Monthly invoices (team admins and auditors). A draft follows usage until its
    month ends; an issued invoice never changes: edits are refused (409) and audited."""

    queryset = Invoice.objects.select_related("team")
    read_roles = BILL_ROLES
    filterset_fields = ["team", "status", "month"]

    def get_queryset(self):
        qs = super().get_queryset()
        if self.action == "retrieve":
            qs = qs.prefetch_related("lines__refers_to")
        return qs

    def get_serializer_class(self):
        return InvoiceDetailSerializer if self.action == "retrieve" else InvoiceSerializer

    @extend_schema(request=InvoiceMemoSerializer, responses={200: InvoiceSerializer, 409: OpenApiResponse(description="issued")})
    def partial_update(self, request, pk=None):
        invoice = self.get_object()
        self.require("billing.manage", invoice, "change invoices")
        form = InvoiceMemoSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        invoice = invoices.update_invoice(actor=request.user, invoice=invoice, memo=form.validated_data["memo"])
        return Response(InvoiceSerializer(invoice).data)

    @extend_schema(request=None, responses={409: OpenApiResponse(description="invoices are never deleted")})
    def destroy(self, request, pk=None):
        invoice = self.get_object()
        if invoice.is_issued:
            invoices.refuse_invoice_change(actor=request.user, invoice=invoice, attempted="delete")
        raise invoices.BillingConflict("A draft follows metered usage; it cannot be deleted.")

    @extend_schema(request=AdjustmentSerializer, responses={201: InvoiceDetailSerializer})
    @action(detail=True, methods=["post"])
    def adjustments(self, request, pk=None):
        """Operators: add a credit (negative) or charge to this draft."""
        invoice = self.get_object()
        require(request.user, "billing.operate", message="Only operators can adjust invoices.")
        form = AdjustmentSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        invoices.add_adjustment(actor=request.user, team=invoice.team, invoice=invoice, **form.validated_data)
        fresh = self.get_queryset().prefetch_related("lines__refers_to").get(pk=invoice.pk)
        return Response(InvoiceDetailSerializer(fresh).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=InvoiceSerializer)
    @action(detail=True, methods=["post"])
    def issue(self, request, pk=None):
        """Operators: issue a draft whose month is over (the periodic task does this)."""
        invoice = self.get_object()
        require(request.user, "billing.operate", message="Only operators can issue invoices.")
        return Response(InvoiceSerializer(invoices.issue_invoice(actor=request.user, invoice=invoice)).data)


def _scoped_charges(request, roles, team_id):
    qs = Charge.objects.for_user(request.user, roles)
    team = None
    if team_id is not None:
        team = Team.objects.for_user(request.user, roles).filter(pk=team_id).first()
        if team is None:
            raise Http404("No such team, or not yours to see.")
        qs = qs.filter(team=team)
    return qs, team


class CostView(APIView):
    """Costs of your teams over [start, end), grouped by day, instance, GPU model,
    pricing category, team, scaling group or job (queued jobs' charges only). Members see their teams' costs."""

    @extend_schema(parameters=[CostQuerySerializer], responses=CostReportSerializer)
    def get(self, request):
        query = CostQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        start, end = costs.parse_range(data.get("start"), data.get("end"))
        qs, _ = _scoped_charges(request, READ_ROLES, data.get("team"))
        qs = costs.in_range(qs, start, end)
        rows = costs.grouped(qs, data["group_by"])
        body = {"currency": currency(), "start": start, "end": end, "group_by": data["group_by"],
                "total": sum((r["billed_cost"] for r in rows), pricing.from_cents(0)), "rows": rows}
        return Response(CostReportSerializer(body).data)


class ExportNegotiation(DefaultContentNegotiation):
    """``?format=`` names the export format here, not a DRF renderer."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ExportView(APIView):
    """Charges of [start, end) as CSV or FOCUS 1.2 columns, streamed. Team admins and
    auditors; every export is audited."""

    content_negotiation_class = ExportNegotiation

    @extend_schema(
        parameters=[ExportQuerySerializer],
        responses={(200, "text/csv"): OpenApiTypes.STR},
        description="CSV (format=csv) or FOCUS 1.2 (format=focus) rows, one per charge (instance or reservation, UTC day, "
                    "price), then one per credit, adjustment or correction on the invoices of the months starting in range.",
    )
    def get(self, request):
        query = ExportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        start, end = costs.parse_range(data.get("start"), data.get("end"))
        qs, team = _scoped_charges(request, BILL_ROLES, data.get("team"))
        exports.record_export(actor=request.user, fmt=data["format"], start=start, end=end, team=team)
        on_invoices = Invoice.objects.for_user(request.user, BILL_ROLES).filter(period_start__gte=start, period_start__lt=end)
        if team is not None:
            on_invoices = on_invoices.filter(team=team)
        response = StreamingHttpResponse(exports.stream(costs.in_range(qs, start, end), data["format"], on_invoices),
                                         content_type="text/csv; charset=utf-8")
        name = f"costs-{data['format']}-{start:%Y%m%d}-{end:%Y%m%d}.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class IdleGpuView(APIView):
    """Idle cost per GPU over [start, end) (default: this month), and the GPUs billed now
    that sat idle most of the last hour. Operators see the fleet (or one team with
    ``team``); others their teams."""

    @extend_schema(parameters=[CostQuerySerializer], responses=OpenApiTypes.OBJECT)
    def get(self, request):
        query = CostQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        start, end = costs.parse_range(data.get("start"), data.get("end"))
        qs, team = _scoped_charges(request, READ_ROLES, data.get("team"))
        instances = Instance.objects.for_user(request.user, READ_ROLES)
        if team is not None:
            instances = instances.filter(team=team)
        by_gpu = costs.idle_cost_by_gpu(qs, start, end)
        now_idle = rates.idle_billed_gpus(instances, timezone.now())
        return Response({
            "currency": currency(), "start": start, "end": end,
            "by_gpu": [{"instance": g.instance_id, "instance_name": g.instance, "team": g.team, "gpu": g.gpu,
                        "cost": str(g.cost), "idle_cost": str(g.idle_cost), "idle_pct": str(g.idle_pct),
                        "observed_seconds": g.observed_seconds} for g in by_gpu],
            "idle_billed_now": [{"instance": g.instance_id, "instance_name": g.instance, "team": g.team, "gpu": g.gpu,
                                 "idle_pct_last_hour": str(g.idle_pct), "price_per_hour": str(g.price_per_hour)}
                                for g in now_idle],
        })


class CostSummaryView(APIView):
    """One team's month: spent so far (before and after credits), run rate, forecast,
    idle cost and budget. The figures are ``billing.figures``', the same on every page."""

    @extend_schema(parameters=[OpenApiParameter("team", int, required=True)], responses=OpenApiTypes.OBJECT)
    def get(self, request):
        team_id = whole_number(request.query_params.get("team", ""))
        if team_id is None:
            return Response({"team": ["A team id is required."]}, status=status.HTTP_400_BAD_REQUEST)
        qs, team = _scoped_charges(request, READ_ROLES, team_id)
        now = timezone.now()
        month = figures.team_month(team.pk, now=now)
        start = pricing.month_start(now)
        idle = costs.idle_cost(qs, start, pricing.next_month(start))
        budget = Budget.objects.filter(team=team, month=start.date()).first()
        outlook = month.forecast
        return Response({
            "team": team.pk, "currency": currency(), "month": f"{start:%Y-%m}",
            "month_to_date": str(month.month_to_date),
            "credits": str(month.credits),
            "month_to_date_after_credits": str(month.month_to_date_after_credits),
            "as_of": month.as_of,
            "run_rate_per_hour": str(month.run_rate_per_hour),
            "forecast": {"point": str(outlook.point), "low": str(outlook.low), "high": str(outlook.high),
                         "basis": outlook.basis, "at_run_rate": str(outlook.at_run_rate),
                         "from_history": None if outlook.from_history is None else str(outlook.from_history),
                         "history_days": outlook.history_days},
            "idle_cost": str(idle.idle_cost), "cost_without_telemetry": str(idle.unknown_cost),
            "efficiency_pct": None if idle.efficiency_pct is None else str(idle.efficiency_pct),
            "budget": None if budget is None else str(budget.amount),
        })


routes = [
    ("prices", PriceViewSet, "price"),
    ("spot-prices", SpotPriceViewSet, "spot-price"),
    ("reservations", ReservationViewSet, "reservation"),
    ("unrated-usage", UnratedUsageViewSet, "unrated-usage"),
    ("budgets", BudgetViewSet, "budget"),
    ("budget-alerts", BudgetAlertViewSet, "budget-alert"),
    ("invoices", InvoiceViewSet, "invoice"),
]

urlpatterns = [
    path("costs/", CostView.as_view(), name="costs"),
    path("costs/export/", ExportView.as_view(), name="costs-export"),
    path("costs/summary/", CostSummaryView.as_view(), name="costs-summary"),
    path("costs/idle-gpus/", IdleGpuView.as_view(), name="costs-idle-gpus"),
]
