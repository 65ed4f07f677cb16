"""The COPY text ingest builds from decoded records says what the general row path
(``_row`` then ``_copy_line``, used for rows made elsewhere) says, column by column."""

from datetime import UTC, datetime

from agent import protocol
from monitoring import ingest
from monitoring.frames import Metrics, Proc, Record


class Device:
    gpu_id, slice_id, index = 11, None, 0


def held(instance=None, team=None):
    return ingest.Held.of("GPU-a", Device(), instance, team)


def parsed(line: str, columns) -> dict:
    out = dict(zip(columns, line.split("\t"), strict=True))
    out["time"] = datetime.fromisoformat(out["time"])
    return out


def test_copy_text_matches_the_general_row_path():
    t0 = 1_796_000_000.0
    found = [
        (Record(seq=1, t=t0 + 0.25, gpu="GPU-a", m=Metrics(gpu_util=5, temp_c=41.5)), held()),
        (Record(seq=2, t=t0 + 0.25, gpu="GPU-a", m=Metrics(gpu_util=6)), held(instance=3, team=4)),  # same tick
        (Record(seq=3, t=t0 + 0.9999996, gpu="GPU-a", m=Metrics(energy_mj=protocol.U64)), held()),  # rounds up a second
        (Record(seq=4, t=t0 + 86_400.5, gpu="GPU-a", m=protocol.NO_METRICS,
                procs=[Proc(pid=7, name='a\\b "q"')]), held()),  # the next day, a process with a backslash
    ]
    text, days = ingest.copy_text(found)
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == len(found) + 1
    general = [ingest._copy_line(ingest._row(record, h)) for record, h in found]
    for fast, slow in zip(lines, general, strict=False):
        assert parsed(fast, ingest.READING_COLUMNS) == parsed(slow.rstrip("\n"), ingest.SAMPLE_COLUMNS)
    assert days == {datetime.fromtimestamp(t0, tz=UTC).date(), datetime.fromtimestamp(t0 + 86_400.5, tz=UTC).date()}
    assert parsed(lines[2], ingest.READING_COLUMNS)["time"] == datetime.fromtimestamp(t0 + 1, tz=UTC)
