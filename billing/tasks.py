"""Periodic billing work: thin adapters around one service each."""

from celery import shared_task
from django.conf import settings

from . import budgets, meter_runs, price_changes


def schedule() -> dict[str, tuple[float, str]]:
    """Metering and invoicing always; the simulated spot market only where a demo asks
    for it (SPOT_MARKET_SIMULATION), never by default: real spot prices come from
    operators and imported feeds."""
    entries = {
        "billing.meter": (300, "billing.tasks.meter_recent"),
        "billing.issue-invoices": (3600, "billing.tasks.issue_due_invoices"),
    }
    if getattr(settings, "SPOT_MARKET_SIMULATION", False):
        entries["billing.spot-market"] = (900, "billing.tasks.move_spot_market")
    return entries


SCHEDULE = schedule()


@shared_task
def meter_recent() -> int:
    """Meter since the last run (in bounded chunks), refresh the drafts, then check
    budgets and usage held unrated."""
    result = meter_runs.meter_recent()
    budgets.check_budgets()
    meter_runs.check_unrated()
    return result.charges


@shared_task
def issue_due_invoices() -> int:
    return len(meter_runs.issue_due_invoices())


@shared_task
def move_spot_market() -> int:
    return len(price_changes.move_spot_market())
