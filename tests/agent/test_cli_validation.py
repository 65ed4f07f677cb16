import subprocess
import sys
import time

import pytest

from agent.cli import main, plan

SERVER = "ws://127.0.0.1:8000/ws/agent/"


@pytest.fixture
def fail(capsys, tmp_path, monkeypatch):
    """Run the CLI, expect exit 2, return its one line of stderr."""
    monkeypatch.delenv("GPUCONSOLE_AGENT_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def run(*argv: str) -> str:
        assert main(list(argv)) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith("gpuconsole-agent: error: ")
        return err

    return run


def test_it_wants_a_websocket_url(fail):
    assert "--server must be a ws:// or wss:// URL" in fail("--server", "http://h/ws/agent/",
                                                             "--token", "t")  # fmt: skip


def test_it_wants_a_server(fail):
    assert "--server is required" in fail("--token", "t")


def test_it_refuses_a_token_in_the_url(fail):
    assert "never put the token in the URL" in fail("--server", SERVER + "?token=abc")


def test_it_bounds_the_interval(fail):
    assert "--interval must be between 0.2 and 60" in fail(
        "--server", SERVER, "--token", "t", "--interval", "0.1"
    )


def test_the_slow_interval_is_not_shorter_than_the_interval(fail):
    err = fail("--server", SERVER, "--token", "t", "--interval", "10", "--slow-interval", "5")
    assert "--slow-interval must not be shorter than --interval" in err


def test_it_bounds_the_counter_interval(fail):
    err = fail("--server", SERVER, "--token", "t", "--counter-interval", "0.5")
    assert "--counter-interval must be between 1 and 3600 seconds, not 0.5" in err
    err = fail("--server", SERVER, "--token", "t", "--counter-interval", "nan")
    assert "--counter-interval must be between 1 and 3600 seconds" in err


def test_the_counter_interval_is_not_shorter_than_the_interval(fail):
    err = fail("--server", SERVER, "--token", "t", "--interval", "10", "--slow-interval", "10",
               "--counter-interval", "5")  # fmt: skip
    assert "--counter-interval must not be shorter than --interval" in err


def test_the_counter_interval_defaults_to_60_s(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    base = ["--server", SERVER, "--token", "t", "--backend", "sim"]
    assert plan(base).args.counter_interval == 60
    assert plan([*base, "--counter-interval", "120"]).args.counter_interval == 120


def test_it_needs_a_token(fail):
    assert "no token" in fail("--server", SERVER, "--backend", "sim")


def test_it_says_when_the_token_file_cannot_be_read(fail, tmp_path):
    err = fail("--server", SERVER, "--token-file", str(tmp_path / "missing"))
    assert f"cannot read token file {tmp_path / 'missing'}: No such file or directory" in err


def test_it_says_when_the_trace_is_missing(fail, tmp_path):
    err = fail("--server", SERVER, "--token", "t", "--backend", "replay",
               "--trace", str(tmp_path / "nope.jsonl"))  # fmt: skip
    assert "cannot read trace" in err


def test_replay_needs_a_trace(fail):
    assert "--backend replay needs --trace" in fail(
        "--server", SERVER, "--token", "t", "--backend", "replay"
    )


def test_an_unknown_flag_is_one_line(fail):
    assert "unrecognized arguments: --colour" in fail("--server", SERVER, "--colour")


def test_a_bad_backend_is_one_line(fail):
    assert "invalid choice: 'cuda'" in fail("--server", SERVER, "--backend", "cuda")


def test_the_token_may_come_from_the_environment(fail, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUCONSOLE_AGENT_TOKEN", "from-env")
    err = fail("--server", SERVER, "--backend", "replay", "--trace", str(tmp_path / "x"))
    assert "no token" not in err and "cannot read trace" in err


def test_an_unreachable_server_is_one_line_per_attempt(small_trace, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "--server", "ws://127.0.0.1:9/ws/agent/",
         "--token", "t", "--backend", "replay", "--trace", str(small_trace), "--speed", "50",
         "--once", "--spool-dir", str(tmp_path / "spool")],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines, deadline = [], time.monotonic() + 20
    while sum("cannot reach" in line for line in lines) < 2 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
    proc.terminate()
    _, rest = proc.communicate(timeout=10)
    err = "".join(lines) + rest
    failures = [line for line in err.splitlines() if "cannot reach" in line]
    assert failures, err
    assert failures[0].startswith(
        "gpuconsole-agent: error: cannot reach ws://127.0.0.1:9/ws/agent/: connection refused "
        "(retrying in "
    )
    assert "Traceback" not in err
    assert proc.returncode == 0


def test_spread_is_for_the_sim_only(fail):
    assert "--spread are only for --backend sim" in fail(
        "--server", SERVER, "--token", "t", "--spread"
    )


def test_spread_needs_several_hosts_and_repeated_samples(fail):
    assert "--spread needs several hosts" in fail(
        "--server", SERVER, "--token", "t", "--backend", "sim", "--spread"
    )
    assert "with --once each host samples once" in fail(
        "--server", SERVER, "--token", "t", "--backend", "sim", "--hosts", "4", "--spread", "--once"
    )
