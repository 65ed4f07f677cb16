"""Every figure of a team's month, read the way each page, API and export reads it, so
that ``manage.py reconcile_costs`` can say whether they agree to the cent.

Before credits (the month's charges): the cost explorer API's total (by day and by
instance), ``billing.figures`` (summary API, cost explorer page, budgets), the overview
(current month) and the invoice's subtotal (plus corrections of it on later invoices).
After credits: the invoice total, the CSV export and the FOCUS export.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

from django.db.models import Sum

from console.models import Team

from . import costs, exports, figures, pricing
from .models import Charge, Invoice, InvoiceLine, LineKind


@dataclass
class MonthCheck:
    team: str
    month: date
    before: dict[str, Decimal] = field(default_factory=dict)
    after: dict[str, Decimal] = field(default_factory=dict)

    @property
    def differences(self) -> list[str]:
        out = []
        for label, group in (("before credits", self.before), ("after credits", self.after)):
            if len(set(group.values())) > 1:
                out.append(f"{label}: " + ", ".join(f"{k} {v}" for k, v in group.items()))
        return out


def months_of(team: Team) -> list[date]:
    found = set(Charge.objects.filter(team=team).values_list("month", flat=True).distinct())
    found |= set(Invoice.objects.filter(team=team).values_list("month", flat=True))
    return sorted(found)


def check_month(team: Team, month: date, *, now) -> MonthCheck:
    start = pricing.month_start(month)
    end = pricing.next_month(start)
    charges = costs.in_range(Charge.objects.filter(team=team), start, end)
    figure = figures.team_month(team.pk, month, now=now)
    result = MonthCheck(team.name, start.date())
    result.before["explorer by day"] = sum((r["billed_cost"] for r in costs.grouped(charges, "day")), Decimal("0.00"))
    result.before["explorer by instance"] = sum(
        (r["billed_cost"] for r in costs.grouped(charges, "instance")), Decimal("0.00"))
    result.before["summary"] = figure.month_to_date
    if figure.current:
        from monitoring.pages import month_to_date as overview_month_to_date

        result.before["overview"] = overview_month_to_date(team)
    invoice = figure.invoice
    if invoice is not None:
        # An issued month re-metered later is corrected on a later invoice: the invoice
        # plus those corrections is what the month costs now.
        later = InvoiceLine.objects.filter(refers_to=invoice, kind=LineKind.CORRECTION).aggregate(s=Sum("amount"))["s"]
        result.before["invoice subtotal"] = invoice.subtotal + (later or 0)
        result.after["invoice total"] = invoice.total + (later or 0)
    result.after["summary"] = figure.month_to_date_after_credits
    invoices = Invoice.objects.filter(team=team, month=start.date())
    result.after["CSV export"] = _export_total(charges, invoices, "csv", "billed_cost")
    result.after["FOCUS export"] = _export_total(charges, invoices, "focus", "BilledCost")
    return result


def _export_total(charges, invoices, fmt: str, column: str) -> Decimal:
    text = "".join(exports.stream(charges, fmt, invoices))
    return sum((Decimal(row[column]) for row in csv.DictReader(io.StringIO(text))), Decimal("0.00"))
