import json
import subprocess
import sys
from pathlib import Path

from agent.cli import main


def test_the_cli_delivers_a_trace_once_and_exits_zero(threaded_server, small_trace, tmp_path):
    server = threaded_server()
    code = main(["--server", server.url, "--token", "host-token-1", "--backend", "replay",
                 "--trace", str(small_trace), "--speed", "50", "--once", "--host", "node-7",
                 "--spool-dir", str(tmp_path)])  # fmt: skip
    assert code == 0
    assert len(server.stored) == 20 and server.hellos[0]["host"] == "node-7"


def test_a_fleet_connects_each_host_with_its_own_token(threaded_server, tmp_path):
    server = threaded_server(tokens=("t-a", "t-b"))
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps([
        {"host": "a", "token": "t-a", "gpus": [{"uuid": "GPU-a0", "index": 0},
                                               {"uuid": "GPU-a1", "index": 1}]},
        {"host": "b", "token": "t-b", "gpus": [{"uuid": "GPU-b0", "index": 0}]},
    ]))  # fmt: skip
    code = main(["--server", server.url, "--backend", "sim", "--fleet", str(fleet), "--once",
                 "--spool-dir", str(tmp_path / "spool")])  # fmt: skip
    assert code == 0
    assert sorted(h["host"] for h in server.hellos) == ["a", "b"]
    assert sorted(r["gpu"] for r in server.stored.values()) == ["GPU-a0", "GPU-a1", "GPU-b0"]
    assert (tmp_path / "spool" / "a" / "lock").exists()  # each host has its own spool


def test_the_agent_imports_without_django():
    code = "import sys, agent.cli, agent.backends.nvml; "
    code += "assert 'django' not in sys.modules and 'pynvml' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
