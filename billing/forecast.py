"""Month-end spend forecast: pure, Decimal only.

The point forecast is what is spent so far plus the mean daily spend of the last
complete days times the days left; the interval is ±1.2816 standard deviations of daily
spend, scaled by √(days left) — an 80% band if days were independent. With fewer than
``MIN_HISTORY_DAYS`` complete days of history there is no forecast.
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
    mean_daily: Decimal
    history_days: int


def month_end(history: Sequence[Decimal], actual_to_date: Decimal, remaining_seconds: int) -> Forecast | None:
    """``history``: daily spend of the complete days before today, oldest first."""
    if len(history) < MIN_HISTORY_DAYS:
        return None
    recent = [money(x) for x in history[-WINDOW_DAYS:]]
    actual = money(actual_to_date)
    with localcontext() as ctx:
        ctx.prec = 40
        n = len(recent)
        mean = sum(recent, Decimal(0)) / n
        variance = sum(((x - mean) ** 2 for x in recent), Decimal(0)) / (n - 1)
        days_left = Decimal(max(0, remaining_seconds)) / SECONDS_PER_DAY
        point = actual + mean * days_left
        spread = Z_80 * variance.sqrt() * days_left.sqrt()
        low = max(actual, point - spread)
        high = point + spread
    return Forecast(
        point=point.quantize(CENT),
        low=low.quantize(CENT),
        high=high.quantize(CENT),
        mean_daily=mean.quantize(CENT),
        history_days=len(history),
    )
