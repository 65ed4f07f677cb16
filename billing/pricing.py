"""The only code that turns numbers into money: pure functions over ``Decimal`` and
``datetime`` (UTC), no ORM. Prices are per SKU-hour; usage is integer GPU-seconds.

Exact arithmetic: an hourly price (at most 6 decimal places) times whole seconds is an
exact Decimal, so costs are summed as "price-seconds" and divided by 3600 only in the
one rounding step, ``to_cents`` (half up), when a rated line item is formed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Context, Decimal, localcontext

from console.validators import ascii_decimal

CENT = Decimal("0.01")
RATE_PLACES = Decimal("0.000001")
SECONDS_PER_HOUR = 3600
DAY = timedelta(days=1)
MINIMUM_RUN_SECONDS = 60
SPOT_FREE_SECONDS = 3600
ONE_YEAR_FACTOR = Decimal("0.60")
TERM_DAYS = {"1y": 365, "3y": 3 * 365}
BILLABLE_STATES = frozenset({"running", "stopping"})
# Wide enough that dividing price-seconds by 3600 is exact to far below a cent before
# the one rounding step (the same precision whatever the caller's context).
_WIDE = Context(prec=60, rounding=ROUND_HALF_EVEN)


class PricingError(Exception):
    """Usage that the catalog cannot price (no price in effect)."""


def money(value) -> Decimal:
    """Accept only exact numbers: a float never becomes money."""
    if type(value) is Decimal:
        return value
    if isinstance(value, float):
        raise TypeError("money must be Decimal, int or str, never float")
    return value if isinstance(value, Decimal) else ascii_decimal(value)  # text: ASCII digits only


def to_cents(price_seconds: Decimal) -> Decimal:
    """The one rounding step: Σ(hourly price × seconds) → currency, to the cent, half up."""
    return _WIDE.divide(money(price_seconds), SECONDS_PER_HOUR).quantize(CENT, rounding=ROUND_HALF_UP, context=_WIDE)


def cents(amount: Decimal) -> int:
    """A cent-rounded amount as whole cents (how charges are stored)."""
    amount = money(amount)
    scaled = amount.scaleb(2, context=_WIDE)
    whole = int(scaled)
    if scaled != whole:
        raise ValueError(f"{amount} is not a whole number of cents")
    return whole


def whole_cents(price_seconds: Decimal) -> int:
    """``cents(to_cents(price_seconds))`` in integer arithmetic (metering forms tens of
    thousands of line items a window): the same one rounding step, half up."""
    scaled = money(price_seconds).scaleb(6, context=_WIDE)  # millionths of a dollar-hour
    whole = int(scaled)
    if scaled != whole:  # finer than a price's 6 places: the general path
        return cents(to_cents(price_seconds))
    q, r = divmod(abs(whole), 36_000_000)  # a cent is 36,000,000 millionth-dollar-seconds
    q += r >= 18_000_000
    return -q if whole < 0 else q


def from_cents(value: int | None) -> Decimal:
    return Decimal(int(value or 0)).scaleb(-2, context=_WIDE)


def hours(seconds: int) -> Decimal:
    """Seconds as hours, to 4 places (for quantities shown to people)."""
    if type(seconds) is int:
        # seconds / 3600 to 4 places = seconds × 25 / 9 ten-thousandths, half up
        # (9 is odd, so there is never an exact half).
        q, r = divmod(abs(seconds) * 25, 9)
        q += r >= 5
        return Decimal(-q if seconds < 0 else q).scaleb(-4)
    with localcontext() as ctx:
        ctx.prec = 40
        return (Decimal(seconds) / SECONDS_PER_HOUR).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)


def rate(value) -> Decimal:
    """An hourly price, checked: positive, at most 6 decimal places."""
    value = money(value)
    if not value.is_finite() or value <= 0:
        raise ValueError("a price must be a positive amount")
    if value != value.quantize(RATE_PLACES):
        raise ValueError("a price has at most 6 decimal places")
    return value


def one_year_rate(on_demand: Decimal) -> Decimal:
    return (money(on_demand) * ONE_YEAR_FACTOR).quantize(RATE_PLACES, rounding=ROUND_HALF_UP)


def term_end(start: datetime, term: str) -> datetime:
    return start + timedelta(days=TERM_DAYS[term])


# --- time -------------------------------------------------------------------------


def floor_day(t: datetime) -> datetime:
    t = t.astimezone(UTC)
    return datetime(t.year, t.month, t.day, tzinfo=UTC)


def ceil_day(t: datetime) -> datetime:
    f = floor_day(t)
    return f if f == t else f + DAY


def month_start(t: datetime | date) -> datetime:
    return datetime(t.year, t.month, 1, tzinfo=UTC)


def next_month(t: datetime | date) -> datetime:
    return datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=UTC)


def seconds(start: datetime, end: datetime) -> int:
    """Whole seconds from ``start`` to ``end``, each instant floored to its second, so
    that the segments of a stretch add up to the stretch exactly ([a, b) + [b, c) =
    [a, c) whatever the microseconds of a, b and c)."""
    # Integer arithmetic (this runs for every segment metered): the difference's whole
    # seconds, plus one where end's microseconds are below start's (the floored instants
    # are then a second further apart than the difference's whole seconds say).
    d = end - start
    return d.days * 86400 + d.seconds + (end.microsecond < start.microsecond)


def so_far(metered: Decimal, price_per_hour: Decimal | None, since: datetime | None, now: datetime) -> Decimal:
    """What an instance has cost this month at ``now``: its metered charges, plus its
    price per hour over the whole seconds from ``since`` (where metering stopped, or its
    run began if later) to ``now``, rated as metering rates a run still going (per
    second, one rounding step). The instance pages' ticker counts the same way."""
    if price_per_hour is None or since is None or now <= since:
        return metered
    return metered + to_cents(price_per_hour * seconds(since, now))


def day_segments(start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime, datetime]]:
    """(day, segment start, segment end) for each UTC day that [start, end) touches."""
    day = floor_day(start)
    while day < end:
        nxt = day + DAY
        yield day, max(start, day), min(end, nxt)
        day = nxt


# --- runs -------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """A maximal stretch in billable states (running, stopping); ``end`` None: ongoing."""

    start: datetime
    end: datetime | None
    gpus: int
    preempted: bool = False

    def free_spot(self) -> bool:
        """Preempted by the platform within its first hour: not billed."""
        return self.preempted and self.end is not None and seconds(self.start, self.end) < SPOT_FREE_SECONDS

    def minimum_topup(self) -> int:
        """Extra seconds (per GPU) an on-demand run pays to reach the 60-second minimum."""
        if self.end is None:
            return 0
        return max(0, MINIMUM_RUN_SECONDS - seconds(self.start, self.end))


def runs_from_events(
    events: Iterable[tuple[datetime, str, int, bool]], stopping_grace: timedelta | None = None
) -> list[Run]:
    """Runs from lifecycle events (time, to_state, gpu_count, by_platform) in time order.
    A ``stopping`` that lasts longer than ``stopping_grace`` is billed up to the grace
    only: a stop the host never confirmed is the platform's fault, not the team's."""
    runs: list[Run] = []
    start: datetime | None = None
    stopping_at: datetime | None = None
    gpus = 0
    for time, to_state, count, by_platform in events:
        billable = to_state in BILLABLE_STATES
        if billable and start is None:
            start, gpus, stopping_at = time, count, None
        if billable and to_state == "stopping" and stopping_at is None:
            stopping_at = time
        elif not billable and start is not None:
            runs.append(Run(start, _grace_end(time, stopping_at, stopping_grace), gpus,
                            by_platform and to_state == "preempted"))
            start = None
    if start is not None:
        end = None if stopping_at is None or stopping_grace is None else stopping_at + stopping_grace
        runs.append(Run(start, end, gpus))
    return runs


def _grace_end(end: datetime, stopping_at: datetime | None, grace: timedelta | None) -> datetime:
    if stopping_at is None or grace is None:
        return end
    return min(end, stopping_at + grace)


# --- price schedules ----------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """Piecewise-constant hourly prices: ``periods`` are (start, end or None, price),
    sorted, not overlapping. Spot history is a schedule whose periods end where the
    next begins."""

    sku: str
    periods: tuple[tuple[datetime, datetime | None, Decimal], ...]

    @classmethod
    def from_steps(cls, sku: str, steps: Sequence[tuple[datetime, Decimal]]) -> Schedule:
        steps = sorted(steps)
        ends = [t for t, _ in steps[1:]] + [None]
        return cls(sku, tuple((t, end, p) for (t, p), end in zip(steps, ends, strict=True)))

    def __post_init__(self):
        object.__setattr__(self, "_starts", [p[0] for p in self.periods])

    def pieces(self, start: datetime, end: datetime) -> list[tuple[datetime, datetime, Decimal]]:
        """[start, end) cut at price changes; a stretch with no price raises PricingError."""
        first = bisect_right(self._starts, start) - 1
        if first >= 0 and start < end:
            p_end = self.periods[first][1]
            if p_end is None or end <= p_end:  # one price over the whole stretch
                return [(start, end, self.periods[first][2])]
        out = []
        cursor = start
        first = max(0, first)
        for p_start, p_end, price in self.periods[first:]:
            if p_end is not None and p_end <= cursor:
                continue
            if p_start >= end:
                break
            if p_start > cursor:
                raise PricingError(f"No price for {self.sku} at {cursor.isoformat()}.")
            stop = end if p_end is None else min(end, p_end)
            out.append((cursor, stop, price))
            cursor = stop
            if cursor >= end:
                break
        if cursor < end:
            raise PricingError(f"No price for {self.sku} at {cursor.isoformat()}.")
        return out

    def at(self, t: datetime) -> Decimal:
        return self.pieces(t, t + timedelta(seconds=1))[0][2]


def spot_rate(spot: Decimal, max_price: Decimal | None) -> Decimal:
    """What a spot instance pays per GPU-hour: the spot price in effect, never more than
    its max price (it is preempted after a notice when the spot price goes above)."""
    return spot if max_price is None else min(spot, max_price)


def capped(pieces: Iterable[tuple[datetime, datetime, Decimal]], max_price: Decimal | None):
    """Spot schedule pieces, each at ``spot_rate``."""
    return [(s, e, spot_rate(price, max_price)) for s, e, price in pieces]


def price_seconds(pieces: Iterable[tuple[datetime, datetime, Decimal]], gpus: int) -> Decimal:
    """Σ price × seconds × gpus over pieces: exact."""
    return sum((price * seconds(s, e) * gpus for s, e, price in pieces), Decimal(0))


# --- reserved coverage ---------------------------------------------------------------


@dataclass(frozen=True)
class Commitment:
    key: int
    start: datetime
    end: datetime
    gpus: int


@dataclass(frozen=True)
class Use:
    """GPUs of one instance in use over [start, end); lower ``priority`` is covered first."""

    key: int
    start: datetime
    end: datetime
    gpus: int
    priority: tuple = ()


@dataclass
class Coverage:
    covered: dict[tuple[int, int], list[tuple[datetime, datetime, int]]]
    overflow: dict[int, list[tuple[datetime, datetime, int]]]
    unused: dict[int, int]


def allocate(uses: Sequence[Use], commitments: Sequence[Commitment], start: datetime, end: datetime) -> Coverage:
    """Each second of [start, end), commitments (oldest first) cover up to their GPUs of
    the uses in force (by priority); the rest overflows to on-demand, and what no use
    takes is unused commitment (GPU-seconds)."""
    cuts = {start, end}
    for x in (*uses, *commitments):
        cuts.update(t for t in (x.start, x.end) if start < t < end)
    times = sorted(cuts)
    result = Coverage(covered={}, overflow={}, unused={c.key: 0 for c in commitments})
    ordered_uses = sorted(uses, key=lambda u: (u.priority, u.key))
    ordered_commitments = sorted(commitments, key=lambda c: (c.start, c.key))
    for t0, t1 in zip(times, times[1:], strict=False):
        live = [u for u in ordered_uses if u.start <= t0 and t1 <= u.end]
        pool = [[c.key, c.gpus] for c in ordered_commitments if c.start <= t0 and t1 <= c.end]
        for use in live:
            need = use.gpus
            for slot in pool:
                take = min(need, slot[1])
                if take:
                    result.covered.setdefault((use.key, slot[0]), []).append((t0, t1, take))
                    slot[1] -= take
                    need -= take
                if not need:
                    break
            if need:
                result.overflow.setdefault(use.key, []).append((t0, t1, need))
        for key, left in pool:
            result.unused[key] += left * seconds(t0, t1)
    return result


# --- savings hint -----------------------------------------------------------------------


def concurrency_profile(intervals: Iterable[tuple[datetime, datetime, int]]) -> dict[int, int]:
    """{GPUs in use at once: seconds at that level} from (start, end, gpus) intervals."""
    deltas: dict[datetime, int] = {}
    for s, e, g in intervals:
        if e > s:
            deltas[s] = deltas.get(s, 0) + g
            deltas[e] = deltas.get(e, 0) - g
    level, last, profile = 0, None, {}
    for t in sorted(deltas):
        if last is not None and level:
            profile[level] = profile.get(level, 0) + seconds(last, t)
        level += deltas[t]
        last = t
    return profile


@dataclass(frozen=True)
class Saving:
    gpus: int
    on_demand_cost: Decimal
    with_reservation: Decimal
    saving: Decimal


def best_reservation(
    profile: dict[int, int], window_seconds: int, on_demand: Decimal, reserved: Decimal
) -> Saving | None:
    """The reservation size that would have saved most over the window, or None."""
    actual = sum((on_demand * level * secs for level, secs in profile.items()), Decimal(0))
    best: Saving | None = None
    for n in range(1, max(profile, default=0) + 1):
        covered = sum(min(level, n) * secs for level, secs in profile.items())
        cost = reserved * n * window_seconds + on_demand * (sum(lv * s for lv, s in profile.items()) - covered)
        saving = actual - cost
        if saving > 0 and (best is None or saving > best.saving):
            best = Saving(n, actual, cost, saving)
    if best is None:
        return None
    actual_cents, cost_cents = to_cents(best.on_demand_cost), to_cents(best.with_reservation)
    if actual_cents <= cost_cents:
        return None  # saves less than a cent
    return Saving(best.gpus, actual_cents, cost_cents, actual_cents - cost_cents)


# --- advice -----------------------------------------------------------------------------

# A month of advice is 730 hours (365 days × 24 / 12), as cloud price calculators count.
HOURS_PER_MONTH = 730


def monthly(price_per_hour) -> Decimal:
    """What ``price_per_hour`` costs over a 730-hour month, to the cent (one rounding)."""
    return to_cents(money(price_per_hour) * HOURS_PER_MONTH * SECONDS_PER_HOUR)


def monthly_saving(current_per_hour, proposed_per_hour) -> Decimal:
    """A month at the current price less a month at the proposed one, each to the cent."""
    return monthly(current_per_hour) - monthly(proposed_per_hour)
