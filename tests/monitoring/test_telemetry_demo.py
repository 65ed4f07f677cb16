"""The demo's telemetry: agent tokens in private files the agent reads, history that
billing and charts can use, and agent commands the agent accepts."""

import json
import stat
from datetime import timedelta

import pytest

from billing import demo as billing_demo
from console import demo as console_demo
from instances import demo as instances_demo
from monitoring import demo, services
from monitoring.agent import cli
from monitoring.agent.backends.sim import load_fleet
from monitoring.models import HostToken, Rollup1h, Rollup1m


@pytest.fixture
def seeded(db, settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.setattr(demo, "HISTORY", timedelta(hours=3))  # the demo keeps two days
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
    assert hours.count() == 3 * 8
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
