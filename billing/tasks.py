"""Periodic billing work: thin adapters around one service each."""

from celery import shared_task

from . import services

SCHEDULE = {
    "billing.meter": (300, "billing.tasks.meter_recent"),
    "billing.issue-invoices": (3600, "billing.tasks.issue_due_invoices"),
    "billing.spot-market": (900, "billing.tasks.move_spot_market"),
    "billing.preempt-due": (10, "billing.tasks.preempt_due"),
}


@shared_task
def meter_recent() -> int:
    """Meter since the last run, refresh the drafts, then check budgets."""
    result = services.meter_recent()
    services.check_budgets()
    return result.charges


@shared_task
def issue_due_invoices() -> int:
    return len(services.issue_due_invoices())


@shared_task
def move_spot_market() -> int:
    return len(services.move_spot_market())


@shared_task
def preempt_due() -> int:
    return len(services.preempt_due())
