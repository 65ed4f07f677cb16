"""Which precision was in force for an instance, and when (``PrecisionPeriod``).

``instances.lifecycle.set_precision`` writes the periods; the TFLOP/s estimate
(monitoring/flops.py) reads them, so a past window keeps the precision of its time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from .models import Instance, Precision, PrecisionPeriod, PrecisionSource


@dataclass(frozen=True)
class Span:
    start: datetime
    end: datetime | None  # None: in force now
    precision: str
    source: str

    def as_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "precision": self.precision, "source": self.source,
                "declared_by_workload": self.source == PrecisionSource.WORKLOAD}


def spans(instance_ids: Iterable[int], start: datetime | None = None, end: datetime | None = None
          ) -> dict[int, list[Span]]:
    """{instance id: its periods overlapping [start, end), oldest first}. An instance
    whose precision never changed has one span from its launch."""
    ids = list(dict.fromkeys(instance_ids))
    periods = PrecisionPeriod.objects.filter(instance_id__in=ids)
    if start is not None:
        periods = periods.exclude(end__lte=start)
    if end is not None:
        periods = periods.filter(start__lt=end)
    out: dict[int, list[Span]] = {}
    for p in periods.order_by("start", "id"):
        out.setdefault(p.instance_id, []).append(Span(p.start, p.end, p.precision, p.source))
    # Without periods (never changed, or a window before the instance existed): its
    # precision now is the one it always had.
    missing = [i for i in ids if i not in out]
    for pk, precision, created in Instance.objects.filter(pk__in=missing).values_list("pk", "precision", "created_at"):
        source = PrecisionSource.DEFAULT if precision == Precision.BF16 else PrecisionSource.TEAM
        out[pk] = [Span(created, None, precision, source)]
    return out


def current(instance: Instance) -> Span:
    """The span in force now."""
    return spans([instance.pk])[instance.pk][-1]
