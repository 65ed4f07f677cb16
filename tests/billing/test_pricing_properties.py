"""Properties of the pure pricing functions, over random inputs."""

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing import pricing

FAST = settings(max_examples=80, deadline=None)
T0 = datetime(2026, 11, 1, tzinfo=UTC)
prices = st.decimals(min_value=Decimal("0.000001"), max_value=Decimal("99.999999"), places=6)
secs = st.integers(min_value=0, max_value=40 * 86400)


def test_float_never_becomes_money():
    with pytest.raises(TypeError):
        pricing.to_cents(2.5)
    with pytest.raises(TypeError):
        pricing.rate(0.1)


@FAST
@given(st.lists(st.tuples(prices, st.integers(0, 10**7)), min_size=1, max_size=30))
def test_one_rounding_step_is_within_half_a_cent(parts):
    exact = sum((p * s for p, s in parts), Decimal(0))
    cents = pricing.to_cents(exact)
    assert isinstance(cents, Decimal) and cents == cents.quantize(pricing.CENT)
    assert abs(cents - exact / 3600) <= Decimal("0.005")


@FAST
@given(st.integers(-(10**9), 10**12))
def test_hours_are_seconds_over_3600_to_four_places_half_up(seconds):
    with localcontext() as ctx:
        ctx.prec = 40
        expected = (Decimal(seconds) / 3600).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    got = pricing.hours(seconds)
    assert got == expected and str(got) == str(expected)


@FAST
@given(st.integers(-(10**12), 10**12))
def test_cents_round_trip(value):
    amount = pricing.from_cents(value)
    assert str(amount) == str(Decimal(value).scaleb(-2).quantize(pricing.CENT))
    assert pricing.cents(amount) == value


@FAST
@given(st.integers(1, 3600 * 3), st.integers(1, 16), st.booleans())
def test_a_run_pays_at_least_a_minute_and_a_free_spot_run_is_under_an_hour(length, gpus, preempted):
    run = pricing.Run(T0, T0 + timedelta(seconds=length), gpus, preempted)
    assert length + run.minimum_topup() == max(length, 60)
    assert run.free_spot() == (preempted and length < 3600)


@FAST
@given(st.lists(st.tuples(st.integers(0, 5 * 86400), st.sampled_from(["pending", "running", "stopping", "stopped", "preempted"]), st.booleans()), max_size=12))
def test_runs_cover_exactly_the_billable_states(raw):
    events = [(T0 + timedelta(seconds=t), state, 2, platform) for t, state, platform in sorted(raw, key=lambda r: r[0])]
    events.append((T0 + timedelta(days=6), "stopped", 2, False))
    runs = pricing.runs_from_events(events)
    for a, b in zip(runs, runs[1:], strict=False):
        assert a.end is not None and a.end <= b.start
    billable = sum(pricing.seconds(r.start, r.end) for r in runs)
    expected, state, last = 0, None, None
    for time, to_state, _, _ in events:
        if state in pricing.BILLABLE_STATES:
            expected += pricing.seconds(last, time)
        state, last = to_state, time
    assert billable == expected


@FAST
@given(secs, secs)
def test_day_segments_tile_the_interval(a, b):
    start, end = T0 + timedelta(seconds=min(a, b)), T0 + timedelta(seconds=max(a, b) + 1)
    pieces = list(pricing.day_segments(start, end))
    assert pieces[0][1] == start and pieces[-1][2] == end
    assert all(s < e and pricing.floor_day(s) == day and e <= day + pricing.DAY for day, s, e in pieces)
    assert sum(pricing.seconds(s, e) for _, s, e in pieces) == pricing.seconds(start, end)


@FAST
@given(st.lists(st.tuples(st.integers(1, 10 * 86400), prices), min_size=1, max_size=8, unique_by=lambda x: x[0]),
       prices, secs, secs)
def test_a_schedule_prices_every_second_once(changes, first_price, a, b):
    steps = [(T0, first_price)] + [(T0 + timedelta(seconds=t), p) for t, p in changes]
    schedule = pricing.Schedule.from_steps("X", steps)
    start, end = T0 + timedelta(seconds=min(a, b)), T0 + timedelta(seconds=max(a, b) + 1)
    pieces = schedule.pieces(start, end)
    assert sum(pricing.seconds(s, e) for s, e, _ in pieces) == pricing.seconds(start, end)
    whole = pricing.price_seconds(pieces, 3)
    mid = start + (end - start) / 2
    mid = mid.replace(microsecond=0)
    split = pricing.price_seconds(schedule.pieces(start, mid), 3) + pricing.price_seconds(schedule.pieces(mid, end), 3) if start < mid else whole
    assert split == whole


def test_a_gap_in_the_catalog_is_an_error_not_zero():
    schedule = pricing.Schedule("X", ((T0, T0 + timedelta(hours=1), Decimal("1")),))
    with pytest.raises(pricing.PricingError, match="No price for X"):
        schedule.pieces(T0, T0 + timedelta(hours=2))


uses = st.lists(st.tuples(st.integers(0, 86399), st.integers(1, 86400), st.integers(1, 8)), max_size=8)
commitments = st.lists(st.tuples(st.integers(0, 86399), st.integers(1, 86400), st.integers(1, 8)), max_size=3)


@FAST
@given(uses, commitments)
def test_reserved_coverage_never_exceeds_the_commitment_in_any_second(raw_uses, raw_commitments):
    day_end = T0 + pricing.DAY
    use_list = [pricing.Use(i, T0 + timedelta(seconds=s), min(day_end, T0 + timedelta(seconds=s + n)), g, (s, i))
                for i, (s, n, g) in enumerate(raw_uses)]
    com_list = [pricing.Commitment(100 + i, T0 + timedelta(seconds=s), min(day_end, T0 + timedelta(seconds=s + n)), g)
                for i, (s, n, g) in enumerate(raw_commitments)]
    cov = pricing.allocate(use_list, com_list, T0, day_end)
    cuts = sorted({T0, day_end} | {x for u in use_list for x in (u.start, u.end)} | {x for c in com_list for x in (c.start, c.end)})
    for t0, t1 in zip(cuts, cuts[1:], strict=False):
        n = sum(c.gpus for c in com_list if c.start <= t0 and t1 <= c.end)
        running = sum(u.gpus for u in use_list if u.start <= t0 and t1 <= u.end)
        covered = sum(g for pieces in cov.covered.values() for s, e, g in pieces if s <= t0 and t1 <= e)
        over = sum(g for pieces in cov.overflow.values() for s, e, g in pieces if s <= t0 and t1 <= e)
        assert covered == min(n, running)
        assert covered + over == running
    committed = sum(c.gpus * pricing.seconds(c.start, c.end) for c in com_list)
    used = sum(g * pricing.seconds(s, e) for pieces in cov.covered.values() for s, e, g in pieces)
    assert used + sum(cov.unused.values()) == committed


@FAST
@given(st.dictionaries(st.integers(1, 16), st.integers(1, 30 * 86400), max_size=6), prices)
def test_the_savings_hint_never_recommends_a_loss(profile, on_demand):
    window = 30 * 86400
    profile = {k: min(v, window) for k, v in profile.items()}
    hint = pricing.best_reservation(profile, window, on_demand, pricing.one_year_rate(on_demand))
    if hint is not None:
        assert hint.saving > 0 and hint.on_demand_cost - hint.with_reservation == hint.saving
        assert 1 <= hint.gpus <= max(profile)
