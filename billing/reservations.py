"""Reservations: a team's commitment to GPUs of a model for a term, at the term's price."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event
from console.models import Team
from instances.models import GpuModel

from . import prices, pricing
from .models import (
    Reservation,
    Term,
)


@transaction.atomic
def purchase_reservation(
    *, actor, team: Team, gpu_model: GpuModel, gpu_count: int, term: str, start: datetime,
    now: datetime | None = None,
) -> Reservation:
    """Commit ``team`` to ``gpu_count`` GPUs of ``gpu_model`` from ``start`` for the term,
    at the price of the term in effect at ``start`` (fixed for the whole term)."""
    now = _now(now)
    if not isinstance(gpu_count, int) or gpu_count < 1:
        raise ValidationError({"gpu_count": "Reserve at least one GPU."})
    if term not in Term.values:
        raise ValidationError({"term": f"Unknown term {term!r}; use 1y or 3y."})
    if start < now:
        raise ValidationError({"start": "A reservation cannot start in the past."})
    on_demand = prices.in_effect(prices.ON_DEMAND, [gpu_model.name], start).get(gpu_model.name)
    if on_demand is None:
        raise ValidationError({"gpu_model": f"{gpu_model.name} has no on-demand price at {start:%Y-%m-%d %H:%M} UTC."})
    if term == Term.ONE_YEAR:
        hourly = pricing.one_year_rate(on_demand)
    else:
        hourly = prices.in_effect(prices.RESERVED_3Y, [gpu_model.name], start).get(gpu_model.name)
        if hourly is None:
            raise ValidationError({"term": f"The catalog has no 3-year price for {gpu_model.name}."})
    reservation = Reservation.objects.create(
        team=team, gpu_model=gpu_model, gpu_count=gpu_count, term=term, start=start,
        end=pricing.term_end(start, term), hourly=hourly, created_by=_user(actor), created_at=now,
    )
    record_event(
        actor=actor, action="billing.reservation.create", target=reservation, team=team,
        details={"gpu_model": gpu_model.name, "gpu_count": gpu_count, "term": term, "start": start,
                 "hourly": str(hourly)},
    )
    return reservation


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


def _user(actor):
    return actor if getattr(actor, "is_authenticated", False) else None
