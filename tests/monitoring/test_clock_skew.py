"""A host clock running fast cannot park readings in the future: readings stamped
more than TELEMETRY_MAX_SKEW_S ahead are stored at the time they arrived, with a note
on the host; staleness is judged on when the reading shown arrived."""

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.models import AgentState, GpuLatest, Sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu(fleet):
    host = fleet["hosts"]["h200-a"]
    AgentState.objects.create(host=host, connected=True)
    return host.gpus.get()


def test_it_stores_a_reading_from_an_hour_ahead_at_its_arrival(gpu, agent_ingest):
    before = timezone.now()
    agent_ingest(gpu, before + timedelta(hours=1), gpu_util=90.0)
    sample = Sample.objects.get()
    assert before <= sample.time <= timezone.now()
    assert GpuLatest.objects.get().time == sample.time
    note = AgentState.objects.get().last_error
    assert note.startswith("Host clock ahead: 1 reading(s) stamped up to 3600 s")


def test_it_keeps_a_reading_within_the_allowed_skew(gpu, agent_ingest, settings):
    settings.TELEMETRY_MAX_SKEW_S = 120
    ahead = timezone.now() + timedelta(seconds=60)
    agent_ingest(gpu, ahead, gpu_util=90.0)
    assert Sample.objects.get().time == ahead
    assert AgentState.objects.get().last_error == ""


def test_a_corrected_clock_replaces_the_clamped_reading(gpu, agent_ingest):
    agent_ingest(gpu, timezone.now() + timedelta(days=1), gpu_util=90.0)
    agent_ingest(gpu, timezone.now(), gpu_util=10.0)
    assert GpuLatest.objects.get().metrics == {"gpu_util": 10.0}


def test_an_older_reading_does_not_refresh_the_one_shown(gpu, agent_ingest):
    now = timezone.now()
    agent_ingest(gpu, now, gpu_util=50.0)
    GpuLatest.objects.update(last_seen=now - timedelta(minutes=5))
    agent_ingest(gpu, now - timedelta(seconds=30), gpu_util=20.0)  # replayed backlog
    latest = GpuLatest.objects.get()
    assert latest.metrics == {"gpu_util": 50.0}
    assert latest.is_stale()
    assert AgentState.objects.get().last_seen_at >= now  # the agent itself is alive
