"""Month-end spend forecast: pure, Decimal only.

The forecast is never below what is spent so far plus the run rate (what running
instances and reservations cost per hour now) to the end of the month: that is what the
month costs if nothing changes. History adds to it: with ``MIN_HISTORY_DAYS`` complete
days or more, spend so far plus the mean daily spend of the last days times the days
left, when that is higher (usage that comes and goes). The interval is ±1.2816 standard
deviations of daily spend, scaled by √(days left), an 80% band if days were
independent; its low end is never below spend so far plus the commitments (reservations)
to month end, which are billed whatever runs. ``basis`` says which figure won.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext

from .pricing import CENT, money

MIN_HISTORY_DAYS = 7
WINDOW_DAYS = 14
Z_80 = Decimal("1.2816")
SECONDS_PER_DAY = 86400


@dataclass(frozen=True)
class Forecast:
    point: Decimal
    low: Decimal
    high: Decimal
    mean_daily: Decimal | None
    history_days: int
    run_rate_per_hour: Decimal
    at_run_rate: Decimal  # spend so far + run rate × hours left: the floor
    from_history: Decimal | None
    basis: str  # "run_rate" or "history"

    @property
    def basis_text(self) -> str:
        if self.basis == "history":
            return (f"history: {self.mean_daily}/day over the last {min(self.history_days, WINDOW_DAYS)} days, "
                    f"above the run rate ({self.run_rate_per_hour}/h → {self.at_run_rate})")
        return f"run rate: {self.run_rate_per_hour}/h to month end"


def month_end(
    history: Sequence[Decimal], actual_to_date: Decimal, remaining_seconds: int,
    run_rate_per_hour: Decimal = Decimal(0), committed_per_hour: Decimal = Decimal(0),
) -> Forecast:
    """``history``: daily spend of the complete days before today, oldest first;
    ``run_rate_per_hour``: what is billed per hour now; ``committed_per_hour``: the part
    of it that reservations bill whatever runs."""
    actual, rate = money(actual_to_date), money(run_rate_per_hour)
    recent = [money(x) for x in history[-WINDOW_DAYS:]]
    with localcontext() as ctx:
        ctx.prec = 40
        days_left = Decimal(max(0, remaining_seconds)) / SECONDS_PER_DAY
        floor = actual + rate * 24 * days_left
        committed = actual + money(committed_per_hour) * 24 * days_left
        mean = spread = from_history = None
        if len(history) >= MIN_HISTORY_DAYS:
            n = len(recent)
            mean = sum(recent, Decimal(0)) / n
            variance = sum(((x - mean) ** 2 for x in recent), Decimal(0)) / (n - 1)
            from_history = actual + mean * days_left
            spread = Z_80 * variance.sqrt() * days_left.sqrt()
        point = max(floor, from_history) if from_history is not None else floor
        low = max(committed, point - (spread or 0))
        high = point + (spread or 0)
    return Forecast(
        point=point.quantize(CENT), low=low.quantize(CENT), high=high.quantize(CENT),
        mean_daily=None if mean is None else mean.quantize(CENT), history_days=len(history),
        run_rate_per_hour=rate.quantize(CENT), at_run_rate=floor.quantize(CENT),
        from_history=None if from_history is None else from_history.quantize(CENT),
        basis="history" if from_history is not None and from_history > floor else "run_rate",
    )
