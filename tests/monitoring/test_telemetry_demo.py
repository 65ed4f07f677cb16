"""The demo's telemetry: agent tokens in private files the agent reads, history that
billing and charts can use, and agent commands the agent accepts."""

import json
import stat
from datetime import timedelta

import pytest
from django.utils import timezone

from agent import cli
from agent.backends.sim import load_fleet
from billing import demo as billing_demo
from gpuconsole import demo as console_demo
from instances import demo as instances_demo
from instances.models import Instance
from monitoring import demo, services
from monitoring.models import HostToken, Rollup1h, Rollup1m


@pytest.fixture
def seeded(db, settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.setattr(demo, "HISTORY", timedelta(hours=3))  # the demo keeps two days
    monkeypatch.setattr(demo, "ADVICE_HISTORY", timedelta(hours=3))  # and a week for rightsizing
    users = console_demo.seed()
    instances_demo.seed_fleet(actor=users["ops"])
    billing_demo.seed_catalog(users=users)  # a launch needs a price
    instances_demo.seed_instances(users=users)
    demo.seed(users=users)
    return users


def test_tokens_are_written_privately_and_work(seeded, tmp_path):
    fleet = load_fleet(tmp_path / "agent-fleet.json")
    for path in ("agent-fleet.json", "replay.token"):
        assert stat.S_IMODE((tmp_path / path).stat().st_mode) == 0o600
    assert instances_demo.REPLAY_HOST not in {h["host"] for h in fleet}
    for host in fleet:
        assert services.authenticate_agent(host["token"]).host.name == host["host"]
    replay = (tmp_path / "replay.token").read_text().strip()
    assert services.authenticate_agent(replay).host.name == instances_demo.REPLAY_HOST


def test_seeding_again_reuses_the_tokens(seeded, tmp_path):
    before = (tmp_path / "agent-fleet.json").read_text()
    demo.seed(users=seeded)
    assert (tmp_path / "agent-fleet.json").read_text() == before
    assert HostToken.objects.count() == len(json.loads(before)) + 1


def test_running_instances_have_history(seeded):
    hours = Rollup1h.objects.filter(instance__name="acme-train-70b")
    launched = Instance.objects.get(name="acme-train-70b").created_at.replace(minute=0, second=0, microsecond=0)
    recent = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    assert hours.filter(bucket__gte=recent).count() == 3 * 8  # from the minutes
    assert hours.order_by("bucket").first().bucket == launched  # and back to its launch
    minutes = Rollup1m.objects.filter(instance__name="acme-train-70b")
    assert minutes.values("gpu").distinct().count() == 8
    assert minutes.count() >= 3 * 60 * 8
    assert not Rollup1m.objects.filter(instance__state="stopped").exists()
    assert demo.backfill() == 0


def test_the_agent_accepts_the_commands(seeded):
    commands = demo.agent_commands("http://127.0.0.1:8000")
    assert [c[c.index("--backend") + 1] for c in commands] == ["sim", "replay"]
    for command in commands:
        assert command[3:5] == ["--server", "ws://127.0.0.1:8000/ws/agent/"]
        plan = cli.plan(command[3:], env={})
        assert plan.hosts
    replay = cli.plan(commands[1][3:], env={})
    assert replay.hosts[0].host == "use1-h200-replay"
    assert replay.hosts[0].gpus[0]["uuid"] == instances_demo.REPLAY_GPU_UUID


def test_history_follows_the_allocations(seeded):
    train = Rollup1m.objects.filter(instance__name="acme-train-70b").order_by("-bucket")
    assert train.first().gpu_util_avg >= 90  # the live sim carries on with training: no cliff
    pending = Rollup1m.objects.filter(instance__name="acme-new-job")
    assert pending.exists() and all(r.gpu_util_avg == 0 for r in pending)  # pending idles
    notebook = Rollup1m.objects.filter(instance__name="acme-notebook")  # a MIG slice
    assert notebook.exclude(slice=None).count() == notebook.count() > 0
    # An A100's MIG slice reports its memory, but no power and, with no GPM before
    # Hopper, no activity: NVML has no utilization on MIG devices.
    first = notebook.first()
    assert first.mem_used_avg is not None and first.power_mw_avg is None and first.gpu_util_avg is None
    held = Rollup1m.objects.filter(instance__isnull=True)
    assert not held.exists()  # free GPUs have no made-up history


def test_the_sim_agent_follows_the_allocations_and_reports_slices(seeded, tmp_path):
    command = demo.agent_commands("http://127.0.0.1:8000")[0]
    assert "--follow-allocations" in command
    fleet = {h["host"]: h for h in load_fleet(tmp_path / "agent-fleet.json")}
    mig = fleet["euw1-a100-mig-01"]["gpus"][0]
    assert mig["mode"] == "mig" and len(mig["slices"]) == 7
    assert fleet["euw1-h100-vgpu-01"]["gpus"][0]["mode"] == "vgpu"
