"""What the queue page and the API show of a job: its place and expected wait, why it
waits, and what it has cost."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone

from instances import catalog

from .models import (
    PRIORITY_RANK,
    Job,
    JobState,
)


@dataclass(frozen=True)
class QueueInfo:
    """A job's place in the queue (``position`` 1 = next for its GPU model; None when not
    queued), how long it has waited, why, and what it has cost."""

    position: int | None
    ahead: int
    waiting_seconds: int | None
    reason: str
    cost: Decimal
    price_per_hour: Decimal | None

    @property
    def waited(self) -> str:
        return "" if self.waiting_seconds is None else wait_text(self.waiting_seconds)


def wait_text(s: int) -> str:
    """A wait as people read it: 45 s, 12 min, 3 h 05 min, 2 d 4 h."""
    if s < 60:
        return f"{max(s, 0)} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def queue_info(jobs: list[Job], now: datetime | None = None) -> dict[int, QueueInfo]:
    """{job id: its QueueInfo} for the given jobs, in a few queries. Positions count
    every team's queued jobs of the same GPU model (names of others' jobs are never shown)."""
    now = now or timezone.now()
    models = {j.gpu_model_id for j in jobs if j.state == JobState.QUEUED}
    order: dict[int, list[int]] = {}
    for pk, model_id, _priority, _key in sorted(
        Job.objects.filter(state=JobState.QUEUED, gpu_model_id__in=models).values_list(
            "pk", "gpu_model_id", "priority", "queue_key"),
        key=lambda r: (PRIORITY_RANK[r[2]], r[3], r[0]),
    ):
        order.setdefault(model_id, []).append(pk)
    costs = job_costs([j.pk for j in jobs])
    prices: dict[tuple, Decimal | None] = {}
    out = {}
    for job in jobs:
        line = order.get(job.gpu_model_id, [])
        queued = job.state == JobState.QUEUED and job.pk in line
        ahead = line.index(job.pk) if queued else 0
        out[job.pk] = QueueInfo(
            position=ahead + 1 if queued else None,
            ahead=ahead,
            waiting_seconds=int((now - job.waiting_since).total_seconds()) if job.state == JobState.QUEUED else None,
            reason=why_waiting(job, ahead),
            cost=costs.get(job.pk, Decimal("0.00")),
            price_per_hour=_price(job, now, prices),
        )
    return out


def why_waiting(job: Job, ahead: int) -> str:
    """Why a job is not running, in one sentence or two ('' when it runs or ran)."""
    if job.state == JobState.EXPIRED:
        return f"Deadline passed at {job.deadline:%Y-%m-%d %H:%M} UTC before it could start."
    if job.state != JobState.QUEUED:
        return ""
    parts = []
    if job.preempted_at is not None and job.waiting_since == job.preempted_at:
        parts.append(f"Preempted at {job.preempted_at:%Y-%m-%d %H:%M:%S} UTC by a paying launch "
                     f"({job.preempt_reason}); it resumes when capacity frees.")
    if ahead:
        parts.append(f"Behind {ahead} job{'s' if ahead != 1 else ''} for {job.gpu_model.name}.")
    elif job.wait_note:
        parts.append(job.wait_note)
    elif not parts:
        parts.append("Waiting for the scheduler's next pass.")
    return " ".join(parts)


def job_costs(job_ids: list[int]) -> dict[int, Decimal]:
    """{job id: what its runs have cost so far}: the metered charges of its instances."""
    from billing.models import Charge
    from billing.pricing import from_cents

    rows = (
        Charge.objects.filter(instance__job_run__job_id__in=job_ids)
        .values("instance__job_run__job_id").annotate(c=Sum("billed_cents"))
        .values_list("instance__job_run__job_id", "c")
    )
    return {job_id: from_cents(c) for job_id, c in rows}


def _price(job: Job, now: datetime, seen: dict) -> Decimal | None:
    """What the job costs per hour while it runs (the price book's quote)."""
    key = (job.gpu_model.name, job.pricing_model, job.gpu_count)
    if key not in seen:
        quote = catalog.quote(sku=key[0], pricing_model=key[1], count=key[2], team_id=job.team_id, at=now)
        seen[key] = None if quote is None else quote.price_per_hour
    return seen[key]
