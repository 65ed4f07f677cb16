"""Thin Celery adapters for the audit log's periodic work."""

from celery import shared_task
from django.conf import settings

from . import checkpoints, refusals, retention, verification

SCHEDULE = {
    "audit-checkpoint": (
        getattr(settings, "AUDIT_CHECKPOINT_SECONDS", 600),
        "audit.tasks.write_checkpoint",
    ),
    "audit-verify": (getattr(settings, "AUDIT_VERIFY_SECONDS", 86_400), "audit.tasks.verify_chain"),
    "audit-retention": (86_400, "audit.tasks.apply_retention"),
    "audit-refusals": (60, "audit.tasks.flush_refusals"),
}


@shared_task
def write_checkpoint() -> int | None:
    checkpoint = checkpoints.write_checkpoint()
    return checkpoint.seq if checkpoint else None


@shared_task
def verify_chain() -> bool:
    return verification.run_verification(actor="system").valid


@shared_task
def apply_retention() -> int:
    # Bounded per run (one batch); the next run continues where this one stopped.
    return retention.apply_retention(actor="system")


@shared_task
def flush_refusals() -> int:
    return refusals.flush_refusals()
