"""The history chart keeps every change when it thins a long history."""

from datetime import UTC, datetime, timedelta

from scaling.charts import history_figure, thin
from scaling.models import ScalingDecision


def _rows(n, change_at):
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    return [ScalingDecision(pk=i + 1, time=t0 + timedelta(seconds=30 * i), queue_depth=i % 50,
                            desired=2 if i >= change_at else 1, running=2 if i >= change_at + 1 else 1,
                            action="scale_out" if i == change_at else "none", reason="queue_depth")
            for i in range(n)]


def test_a_long_history_is_thinned_but_keeps_its_changes():
    rows = _rows(6000, change_at=4321)
    kept = thin(rows)
    assert len(kept) <= 1510
    assert {4321, 4322} <= {d.pk - 1 for d in kept}
    assert kept[-1].pk == 6000


def test_the_figure_draws_desired_running_and_queue_depth():
    figure = history_figure(_rows(10, change_at=5))
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["Desired", "Running", "Queue depth"]
    assert figure["data"][1]["y"] == [1] * 6 + [2] * 4
    assert figure["data"][2]["yaxis"] == "y2"
