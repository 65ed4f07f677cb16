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

from django.apps import apps
from django.db.models import F, Q, Sum

from console.models import Team
from instances.models import HOLDING_STATES, Instance

from . import costs, exports, figures, pricing
from .models import Charge, Invoice, InvoiceLine, LineKind, UsageRecord


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
        from monitoring.figures import month_to_date as overview_month_to_date

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


def usage_after_end() -> list[str]:
    """Each instance that holds no GPUs (stopped, preempted, terminated, failed) but has
    usage, or a charge for a whole day, after the moment it got there: billing that
    should have stopped with it."""
    ended = ~Q(instance__state__in=HOLDING_STATES)
    found = []
    late = (UsageRecord.objects.filter(ended, end__gt=F("instance__state_changed_at"))
            .values_list("instance__name", "instance__state", "instance__state_changed_at", "end").order_by("end"))
    for name, state, at, end in late:
        found.append(f"instance {name}: usage billed to {end:%Y-%m-%d %H:%M:%S} UTC, after it became {state} at "
                     f"{at:%Y-%m-%d %H:%M:%S} UTC")
    days = (Charge.objects.filter(ended, period_start__gt=F("instance__state_changed_at"))
            .values_list("instance__name", "instance__state", "instance__state_changed_at", "period_start")
            .order_by("period_start"))
    for name, state, at, day in days:
        found.append(f"instance {name}: a charge for {day:%Y-%m-%d}, after it became {state} at "
                     f"{at:%Y-%m-%d %H:%M:%S} UTC")
    return found


def job_costs_differ() -> list[str]:
    """Each queued job whose cost read three ways differs: the charges of its runs'
    instances (what the job's page and API show), the cost explorer's row for it, and
    the charges of every instance launched for it (labelled with its code)."""
    charges = Charge.objects.filter(instance__isnull=False)
    by_runs = _cents(charges.filter(instance__job_run__isnull=False), "instance__job_run__job_id")
    explorer = {int(row["key"]): pricing.cents(row["billed_cost"])
                for row in costs.grouped(charges, "job")}
    labelled = Instance.objects.filter(labels__has_key="job").values_list("pk", "labels")
    codes = {pk: labels["job"] for pk, labels in labelled}
    by_label: dict[str, int] = {}
    for instance_id, c in _cents(charges.filter(instance_id__in=list(codes)), "instance_id").items():
        by_label[codes[instance_id]] = by_label.get(codes[instance_id], 0) + c
    # Read by name: jobs launch through instances and billing reads their rows, never their code.
    jobs = dict(apps.get_model("jobs", "Job").objects.values_list("pk", "name"))
    found = []
    for job_id in sorted(set(jobs) | set(explorer) | {int(c.removeprefix("JOB-")) for c in by_label}):
        three = (by_runs.get(job_id, 0), explorer.get(job_id, 0), by_label.get(f"JOB-{job_id}", 0))
        if len(set(three)) > 1:
            found.append(f"job JOB-{job_id} ({jobs.get(job_id, '?')}): its runs' instances "
                         f"{pricing.from_cents(three[0])}, the cost explorer {pricing.from_cents(three[1])}, "
                         f"the instances launched for it {pricing.from_cents(three[2])}")
    return found


def _cents(charges, key: str) -> dict[int, int]:
    return dict(charges.values(key).annotate(c=Sum("billed_cents")).values_list(key, "c").order_by())


def _export_total(charges, invoices, fmt: str, column: str) -> Decimal:
    text = "".join(exports.stream(charges, fmt, invoices))
    return sum((Decimal(row[column]) for row in csv.DictReader(io.StringIO(text))), Decimal("0.00"))


ENERGY_TOLERANCE = 0.001  # the counters' increase, read two ways, within 0.1%


def energy_differs() -> list[str]:
    """Each team-month whose FOCUS export's x_EnergyKWh differs from the energy its
    instances' counters measured while billed (the registered total, read apart)."""
    found = []
    for team in Team.objects.order_by("name"):
        for month in months_of(team):
            start = pricing.month_start(month)
            charges = Charge.objects.filter(team=team, month=month)
            counted = exports.billed_energy_kwh(charges)
            if counted is None:
                return []
            text = "".join(exports.stream(charges, "focus"))
            exported = sum(float(row["x_EnergyKWh"] or 0) for row in csv.DictReader(io.StringIO(text)))
            if abs(exported - counted) > ENERGY_TOLERANCE * max(counted, 1e-9):
                found.append(f"{team.name} {start:%Y-%m}: energy in the FOCUS export {exported:.6f} kWh, "
                             f"the counters while billed {counted:.6f} kWh")
    return found
