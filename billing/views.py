"""Billing pages: the cost explorer, invoices (with a printable version), budgets,
reservations and prices. Thin: scope with ``for_user``, call services, render."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Min, Sum
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from console.models import Team
from console.policy import may, policy_required, require
from console.templatetags.money import rate as rate_text
from console.tenancy import ADMIN_ROLES, AUDIT_ROLES, READ_ROLES
from console.validators import MONTH_HELP, parse_month, whole_number
from instances import preemption as instance_preemption
from instances import transitions as instance_transitions
from instances.models import Instance, NoticeStatus, PreemptionNotice, PricingModel, State

from . import (
    budgets,
    charts,
    costs,
    figures,
    forms,
    invoices,
    price_changes,
    prices,
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
    UsageRecord,
    currency,
)

BILL_ROLES = AUDIT_ROLES


def _team(request, roles):
    teams = Team.objects.for_user(request.user, roles).order_by("name")
    chosen = request.GET.get("team", "")
    team = teams.filter(pk=pk).first() if (pk := whole_number(chosen)) is not None else teams.first()
    if team is None:
        if chosen:
            raise PermissionDenied("No such team, or not yours to see.")
        raise PermissionDenied("You are not in a team whose costs you may see.")
    return team, teams


def _month(request, now) -> date | None:
    """The month the page shows: ``?month=YYYY-MM``, this month when not given; None when
    it is not a month the console can hold."""
    raw = request.GET.get("month", "")
    if not raw:
        return pricing.month_start(now).date()
    try:
        return parse_month(raw)
    except ValidationError:
        return None


# The idle GPUs one page lists, most idle cost first; the API (costs/idle-gpus/) has all.
IDLE_GPU_ROWS = 20


@policy_required("costs.read")
def cost_explorer(request):
    now = timezone.now()
    team, teams = _team(request, READ_ROLES)
    month = _month(request, now)
    if month is None:
        return render(request, "console/error.html", {"status": 400, "message": MONTH_HELP}, status=400)
    start = pricing.month_start(month)
    end = pricing.next_month(start)
    charges = Charge.objects.for_user(request.user, READ_ROLES).filter(team=team)
    window = costs.in_range(charges, start, end)
    current = start <= now < end
    sees_bill = may(request.user, "billing.read", team)
    days, series = costs.daily_by_category(charges, start, end)
    idle = costs.idle_cost(charges, start, end)
    budget = Budget.objects.filter(team=team, month=month).first() if sees_bill else None
    figure = figures.team_month(team.pk, month, now=now)
    outlook = figure.forecast
    cumulative, running = [], Decimal("0.00")
    shown_days = [d for d in days if d <= now.date()]
    for i, _ in enumerate(shown_days):
        running += sum((series[c][i] for c in series), Decimal(0))
        cumulative.append(running)
    plots = {
        "daily": charts.daily_cost(days, series, currency()),
        "forecast": charts.forecast(shown_days, cumulative, (end - timedelta(days=1)).date(), outlook,
                                    budget.amount if budget else None, currency()),
        "instances": charts.breakdown([(r["label"], r["billed_cost"]) for r in costs.grouped(window, "instance")],
                                      "Cost by instance", "Instance", currency()),
        "models": charts.breakdown([(r["label"], r["billed_cost"]) for r in costs.grouped(window, "model")],
                                   "Cost by GPU model", "GPU model", currency()),
        "coverage": charts.coverage(costs.coverage_by_day(charges, start, end)),
        "idle": charts.idle(idle.rows, currency()),
    }
    by_group = costs.grouped(window, "scaling_group")
    if any(r["key"] != "none" for r in by_group):
        plots["scaling"] = charts.breakdown([(r["label"], r["billed_cost"]) for r in by_group],
                                            "Cost by scaling group", "Scaling group", currency())
    by_job = [(r["label"], r["billed_cost"]) for r in costs.grouped(window, "job")]
    if by_job:
        plots["jobs"] = charts.breakdown(by_job, "Cost by job (queued jobs)", "Job", currency())
    by_category = {r["key"]: r for r in costs.grouped(window, "pricing_category")}
    context = {
        "team": team, "teams": teams, "month": month, "months": _months(charges, now), "current": current,
        "spent": figure.month_to_date, "by_category": [by_category.get(c) for c in ("standard", "committed", "dynamic")],
        "idle_gpus": costs.first_rows(costs.idle_cost_by_gpu(charges, start, end), IDLE_GPU_ROWS),
        "flops_costs": costs.cost_per_pflop_hour(charges, start, end),
        "idle_now": rates.idle_billed_gpus(Instance.objects.for_user(request.user, READ_ROLES).filter(team=team), now)
        if current else [],
        "idle_now_min_minutes": int(rates.IDLE_NOW_MIN_OBSERVED.total_seconds() // 60),
        "outlook": outlook, "figure": figure, "budget": budget, "idle": idle, "figures": plots, "sees_bill": sees_bill,
        "currency": currency(), "start": start, "end": end,
        "alerts": BudgetAlert.objects.for_user(request.user, BILL_ROLES).filter(team=team, budget__month=month)
        if sees_bill else [],
        "notices": PreemptionNotice.objects.for_user(request.user).filter(team=team, status=NoticeStatus.PENDING)
        .select_related("instance"),
        "savings": costs.savings_hints(UsageRecord.objects.for_user(request.user).filter(team=team), now)
        if sees_bill else [],
        "invoice": Invoice.objects.for_user(request.user, BILL_ROLES).filter(team=team, month=month).first()
        if sees_bill else None,
        "last_invoice": Invoice.objects.for_user(request.user, BILL_ROLES).filter(team=team, status="issued")
        .order_by("-month").first() if sees_bill else None,
    }
    return render(request, "billing/costs.html", context)


def _months(charges, now) -> list[date]:
    first = charges.order_by("month").values_list("month", flat=True).first()
    months, m = [], pricing.month_start(now).date()
    while first is not None and m >= first and len(months) < 24:
        months.append(m)
        prev = pricing.month_start(pricing.month_start(m) - timedelta(days=1))
        m = prev.date()
    return months or [pricing.month_start(now).date()]


@policy_required("billing.read", message="Invoices are for team admins and auditors.")
def invoice_list(request):
    invoices = Invoice.objects.for_user(request.user, BILL_ROLES).select_related("team")
    return render(request, "billing/invoice_list.html", {"invoices": invoices[:200]})


def _invoice(request, pk):
    return get_object_or_404(
        Invoice.objects.for_user(request.user, BILL_ROLES).select_related("team").prefetch_related("lines__refers_to"),
        pk=pk,
    )


@policy_required("signed_in")
def invoice_detail(request, pk):
    invoice = _invoice(request, pk)
    context = {"invoice": invoice, "currency": invoice.currency,
               "can_memo": not invoice.is_issued and may(request.user, "billing.manage", invoice)}
    return render(request, "billing/invoice_detail.html", context)


@policy_required("signed_in")
def invoice_print(request, pk):
    invoice = _invoice(request, pk)
    provider = "GPU Console"
    return render(request, "billing/invoice_print.html", {"invoice": invoice, "provider": provider})


@policy_required("signed_in", methods=["POST"])
def invoice_memo(request, pk):
    invoice = _invoice(request, pk)
    require(request.user, "billing.manage", invoice, "Only team admins change invoices.")
    try:
        invoices.update_invoice(actor=request.user, invoice=invoice, memo=request.POST.get("memo", ""))
    except invoices.InvoiceIssued as exc:
        messages.error(request, str(exc))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Memo saved.")
    return redirect("invoice-detail", pk=invoice.pk)


def _admin_form(request, form_class, verb, **kwargs):
    form = form_class(request.POST or None, user=request.user, **kwargs)
    if request.method == "POST" and form.is_valid():
        try:
            return form, verb(form.cleaned_data)
        except ValidationError as exc:
            form.apply_errors(exc)
    return form, None


def _editing(request) -> dict | None:
    """?edit=<id>: the budgets form starts from that budget (saving changes it)."""
    raw = request.GET.get("edit", "")
    pk = whole_number(raw)
    budget = Budget.objects.for_user(request.user, ADMIN_ROLES).filter(pk=pk).first() if pk is not None else None
    if budget is None:
        return None
    return {"team": budget.team_id, "month": budget.month.strftime("%Y-%m"), "amount": budget.amount,
            "actual_thresholds": ", ".join(map(str, budget.actual_thresholds)),
            "forecast_thresholds": ", ".join(map(str, budget.forecast_thresholds)), "recurring": budget.recurring}


@policy_required("billing.read", message="Budgets are for team admins and auditors.")
def budget_list(request):
    now = timezone.now()

    def create(data):
        return budgets.save_budget(
            actor=request.user, team=data["team"], month=data["month"].replace(day=1), amount=data["amount"],
            actual_thresholds=data["actual_thresholds"], forecast_thresholds=data["forecast_thresholds"],
            recurring=data["recurring"],
        )

    editing = _editing(request)
    form, made = _admin_form(request, forms.BudgetForm, create, initial=editing)
    if made is not None:
        messages.success(request, f"Budget for {made.team.name}, {made.month:%B %Y}, saved.")
        return redirect("budget-list")
    shown = list(Budget.objects.for_user(request.user, BILL_ROLES).select_related("team")[:100])
    this_month = pricing.month_start(now).date()
    for b in shown:
        # A month yet to come has spent nothing (and one stored before months were
        # bounded, 9999-12, has no month after it to sum to).
        spent = Decimal(0) if b.month > this_month else costs.total(costs.in_range(
            Charge.objects.filter(team=b.team), pricing.month_start(b.month), pricing.next_month(b.month)))
        b.spent, b.used_pct = spent, (spent * 100 / b.amount).quantize(Decimal("0.1"))
        b.editable = may(request.user, "billing.manage", b)
    context = {"form": form, "budgets": shown, "can_edit": may(request.user, "billing.manage"), "editing": editing,
               "alerts": BudgetAlert.objects.for_user(request.user, BILL_ROLES).select_related("budget__team")[:50],
               "currency": currency(), "now": now}
    return render(request, "billing/budgets.html", context, status=400 if request.method == "POST" else 200)


@policy_required("signed_in", methods=["POST"])
def budget_delete(request, pk):
    budget = get_object_or_404(Budget.objects.for_user(request.user, BILL_ROLES), pk=pk)
    require(request.user, "billing.manage", budget, "Only team admins manage budgets.")
    budgets.delete_budget(actor=request.user, budget=budget)
    messages.success(request, "Budget deleted.")
    return redirect("budget-list")


@policy_required("costs.read", message="Reservations belong to teams; you are in none.")
def reservation_list(request):

    def buy(data):
        return reservations.purchase_reservation(
            actor=request.user, team=data["team"], gpu_model=data["gpu_model"], gpu_count=data["gpu_count"],
            term=data["term"], start=data["start"],
        )

    form, made = _admin_form(request, forms.ReservationForm, buy)
    if made is not None:
        messages.success(request, f"{made.code}: {made.gpu_count} × {made.gpu_model.name} from {made.start:%Y-%m-%d %H:%M} UTC.")
        return redirect("reservation-list")
    now = timezone.now()
    held = Reservation.objects.for_user(request.user).select_related("team", "gpu_model").order_by("-start")
    rows = []
    for r in held[:100]:
        used = Charge.objects.filter(reservation=r).aggregate(c=Sum("billed_cents"))["c"]
        rows.append({"r": r, "status": r.status(now), "billed": pricing.from_cents(used), "basis": _basis(r)})
    context = {"form": form, "rows": rows, "can_buy": may(request.user, "billing.manage"), "currency": currency()}
    return render(request, "billing/reservations.html", context, status=400 if request.method == "POST" else 200)


def _basis(r: Reservation) -> str:
    """Why a reservation costs what it does (it can differ from today's catalog)."""
    if r.term == "1y":
        listed = prices.in_effect(prices.ON_DEMAND, [r.gpu_model.name], r.start).get(r.gpu_model.name)
        if listed is not None:
            return f"60% of the {rate_text(listed)}/h on-demand price when it started, fixed for the term"
    return "the catalog's 3-year price when it started, fixed for the term"


@policy_required("signed_in")
def price_list(request):
    now = timezone.now()
    operator = may(request.user, "billing.operate")
    price_form = forms.PriceForm(request.POST if "set_price" in request.POST else None)
    spot_form = forms.SpotPriceForm(request.POST if "set_spot" in request.POST else None)
    if request.method == "POST":
        require(request.user, "billing.operate", message="Only operators set prices.")
        try:
            if "set_price" in request.POST and price_form.is_valid():
                d = price_form.cleaned_data
                price_changes.set_price(actor=request.user, sku=d["sku"], kind=d["kind"], hourly=d["hourly"],
                                   effective_from=d["effective_from"], effective_until=d["effective_until"])
                messages.success(request, f"Price for {d['sku']} saved.")
                return redirect("price-list")
            if "set_spot" in request.POST and spot_form.is_valid():
                d = spot_form.cleaned_data
                price_changes.set_spot_price(actor=request.user, sku=d["sku"], hourly=d["hourly"])
                messages.success(request, f"Spot price for {d['sku']} set.")
                return redirect("price-list")
        except ValidationError as exc:
            (price_form if "set_price" in request.POST else spot_form).apply_errors(exc)
    skus = sorted(price_changes.known_skus())
    found = {kind: prices.in_effect(kind, skus, now) for kind in (prices.ON_DEMAND, prices.RESERVED_3Y, prices.SPOT,
                                                                  prices.IDLE)}
    rows = [{"sku": sku, "on_demand": found[prices.ON_DEMAND].get(sku), "three_year": found[prices.RESERVED_3Y].get(sku),
             "spot": found[prices.SPOT].get(sku), "idle": found[prices.IDLE].get(sku)} for sku in skus]
    for row in rows:
        row["one_year"] = pricing.one_year_rate(row["on_demand"]) if row["on_demand"] else None
    context = {
        "rows": rows, "operator": operator, "price_form": price_form, "spot_form": spot_form,
        "periods": Price.objects.order_by("sku", "kind", "-effective_from")[:200],
        "recent_spot": SpotPrice.objects.order_by("-time")[:30], "currency": currency(),
        "unrated": list(UnratedUsage.objects.select_related("instance", "team")[:50]) if operator else [],
        "unrated_skus": sorted(set(UnratedUsage.objects.values_list("sku", flat=True))) if operator else [],
        "unrated_since": UnratedUsage.objects.aggregate(first=Min("period_start"))["first"] if operator else None,
        "spot_instances": Instance.objects.for_user(request.user).filter(
            pricing_model=PricingModel.SPOT, state=State.RUNNING).select_related("team")[:50] if operator else [],
    }
    return render(request, "billing/prices.html", context, status=400 if request.method == "POST" else 200)


@policy_required("fleet.operate", message="Only operators preempt spot instances.", methods=["POST"])
def preempt(request, pk):
    instance = get_object_or_404(Instance.objects.for_user(request.user), pk=pk)
    try:
        item = instance_preemption.issue_preemption_notice(actor=request.user, instance=instance)
    except instance_transitions.LifecycleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{instance.name} will be preempted at {item.preempt_at:%H:%M:%S} UTC.")
    return redirect(reverse("price-list"))
