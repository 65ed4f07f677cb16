"""bench/gpu_e2e.py's own setup and checks, run on the replay backend: the recorded H200
trace goes through the agent's wire encoding and the real ingest consumer, and the
script's checks read it back through the metrics and alerts API. If the GPU run would
stop (a launch without a price) or a check could no longer pass (an idle rule that
never fires), this fails first."""

import importlib.util
import secrets
from datetime import UTC, datetime

import pytest
from asgiref.sync import sync_to_async
from rest_framework.test import APIClient
from telemetry_wire import TRACE, Agent

from agent import protocol
from agent.backends.replay import ReplaySource, Trace
from alerting import periodic

pytestmark = pytest.mark.django_db(transaction=True)

BENCH = TRACE.parents[2] / "bench" / "gpu_e2e.py"
IDLE_HOLD_S = 5  # the trace holds its 100 GiB for 10 s


@pytest.fixture(scope="module")
def e2e():
    spec = importlib.util.spec_from_file_location("gpu_e2e", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def replayed(e2e):
    """The trace replayed as if it ran 10 minutes ago; its phases placed where it landed."""
    source = ReplaySource(Trace.load(TRACE), host=e2e.HOST, once=True)
    start = datetime.now(UTC).timestamp() - 600
    offset = start - source.trace.lines[0].t
    records = [source.record(line, m, line.t + offset) for _, line, m in source.frames()]
    phases = e2e.trace_phases(e2e.trace_lines(TRACE), offset)
    return source, records, {p["phase"]: p for p in phases}


async def replay_and_check(e2e, replayed) -> list[tuple[str, bool]]:
    """The script's setup, the trace through the consumer, the alert task, the checks."""
    source, records, phases = replayed
    api_token, host_token = await sync_to_async(e2e.prepare)()
    info, boot = source.hosts()[0], secrets.token_hex(16)
    async with Agent(host_token) as agent:
        await agent.send(protocol.hello_frame(host=info.host, boot_id=boot, backend="replay", gpus=info.gpus,
                                              driver=info.driver))
        assert (await agent.recv())["type"] == "welcome"
        # Pinned before the trace's first reading, as the script pins it before the workload.
        pinned_at = datetime.fromtimestamp(phases["idle"]["start"] - 60, UTC)
        await sync_to_async(e2e.pin_instance)(source.uuid, idle_hold_s=IDLE_HOLD_S, at=pinned_at)
        for first in range(0, len(records), 50):
            bodies = [protocol.encode_record(r, first + i + 1) for i, r in enumerate(records[first:first + 50])]
            await agent.send(protocol.samples_frame(boot, [b for b in bodies if b]))
            assert (await agent.recv())["type"] == "ack"
    # The periodic alert task, at the end of the copy and inside the hold.
    hold, copy = phases["hold"], phases["copy"]
    for moment in (copy["end"], hold["start"] + IDLE_HOLD_S + 1, hold["end"]):
        await sync_to_async(periodic.evaluate)(datetime.fromtimestamp(moment, UTC))

    return await sync_to_async(checks_through_the_api)(e2e, api_token, source.uuid, phases)


async def test_the_gpu_runs_checks_pass_on_the_replayed_trace(e2e, replayed):
    results = await replay_and_check(e2e, replayed)
    assert [what for what, ok in results if not ok] == []
    assert len(results) == 12


def checks_through_the_api(e2e, api_token, uuid, phases):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token}")

    def get(path, **params):
        response = client.get(path, params)
        assert response.status_code == 200, response.content
        return response.json()

    rows = [e2e.phase_row(get, uuid, p) for p in phases.values() if p["end"] - p["start"] >= 5]
    idle = get("/api/v1/alerts/", kind="idle", page_size=100)["results"]
    return e2e.checks(rows, idle, phases, e2e.integrity(uuid))


async def test_a_short_idle_window_is_named_in_seconds(e2e, replayed):
    from alerting.models import Alert

    await replay_and_check(e2e, replayed)
    message = (await Alert.objects.filter(kind="idle").afirst()).message
    assert message.endswith("for the last 5 s.")
