from datetime import timedelta

from billing_support import at

from billing import pricing


def test_segments_with_microseconds_add_up_to_the_whole():
    a = at(3, 10) + timedelta(microseconds=700_000)
    cuts = [a + timedelta(seconds=s, microseconds=m) for s, m in [(0, 0), (10, 400_000), (20, 900_000), (31, 100_000)]]
    parts = sum(pricing.seconds(x, y) for x, y in zip(cuts, cuts[1:], strict=False))
    assert parts == pricing.seconds(cuts[0], cuts[-1]) == 31


def test_day_segments_of_a_run_with_microseconds_add_up():
    start, end = at(3, 23, 59, 59) + timedelta(microseconds=999_999), at(5, 0, 0, 1) + timedelta(microseconds=1)
    parts = sum(pricing.seconds(s, e) for _, s, e in pricing.day_segments(start, end))
    assert parts == pricing.seconds(start, end) == 86_402
