"""A trace or fleet file nested too deeply is one line naming the file and exit 2, like
every other bad file the agent reads."""

import pytest

from agent.cli import main

SERVER = "ws://127.0.0.1:9/ws/agent/"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def fail(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("GPUCONSOLE_AGENT_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def run(*argv: str) -> str:
        assert main(list(argv)) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        return err

    return run


def test_a_deep_trace_is_named(fail, tmp_path):
    trace = tmp_path / "deep.jsonl"
    trace.write_text(DEEP + "\n")
    err = fail("--server", SERVER, "--token", "t", "--host", "h", "--backend", "replay", "--trace", str(trace),
               "--once", "--spool-dir", str(tmp_path / "spool"))
    assert f"trace {trace} line 1: JSON nested too deeply" in err


def test_a_deep_fleet_file_is_named(fail, tmp_path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(DEEP)
    err = fail("--server", SERVER, "--backend", "sim", "--fleet", str(fleet), "--once",
               "--spool-dir", str(tmp_path / "spool"))
    assert f"fleet file {fleet}: JSON nested too deeply" in err
