"""A reading's ``t`` text: made once for the readings of one tick, right for every time."""

from datetime import UTC, datetime

from monitoring import readings


def entry(t):
    return readings.current(uuid="GPU-a", t=t, m={}, stale=False)


def test_each_time_reads_as_its_own_iso_text():
    times = [1_796_000_000.25, 1_796_000_000.25, 1_796_000_001.5, 1_796_000_000.25, 0.0]
    for t in times:
        assert entry(t)["t"] == datetime.fromtimestamp(t, tz=UTC).isoformat()


def test_a_datetime_is_used_as_it_is():
    when = datetime(2026, 12, 3, 19, 30, 1, 250000, tzinfo=UTC)
    entry(when.timestamp())
    assert entry(when)["t"] == "2026-12-03T19:30:01.250000+00:00"
