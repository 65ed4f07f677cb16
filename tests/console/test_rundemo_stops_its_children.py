"""``manage.py rundemo`` stopped with SIGTERM (kill, a service manager) stops what it
started, as Ctrl-C does: no console server is left serving on its port. Its children stop
by themselves, not by being killed, also where it was started with SIGINT ignored (a
background job of a script, as CI runs the suite) and they inherited that."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    var = tmp_path_factory.mktemp("rundemo")
    env = {**os.environ, "GPUCONSOLE_VAR_DIR": str(var), "DATABASE_URL": "", "REDIS_URL": "",
           "INPROCESS_SCHEDULER": "false", "PYTHONUNBUFFERED": "1"}
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v0"], cwd=ROOT, env=env,
                   check=True, timeout=300)
    return env


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("how", ["sigterm, started ignoring SIGINT", "ctrl-c at a terminal"])
def test_a_stop_signal_stops_the_server_it_started(migrated, how):
    port = _free_port()
    server: list[int] = []
    if how.startswith("sigterm"):
        spawn, stop = {"preexec_fn": _ignore_sigint}, lambda demo: demo.send_signal(signal.SIGTERM)
    else:  # a terminal sends SIGINT to its foreground process group
        spawn, stop = {"start_new_session": True}, lambda demo: os.killpg(demo.pid, signal.SIGINT)
    demo = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "rundemo", "--no-agents", "--port", str(port)],
                            cwd=ROOT, env=migrated, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **spawn)
    try:
        deadline = time.monotonic() + 90
        while "is running at" not in (line := demo.stdout.readline()):
            assert line and time.monotonic() < deadline, "rundemo did not start"
        server = _children(demo.pid)
        assert server and all(_alive(pid) for pid in server)
        assert all(os.getpgid(pid) != os.getpgid(demo.pid) for pid in server)
        stop(demo)
        assert demo.wait(timeout=60) == 0
        said = demo.stdout.read()
        assert "killed" not in said, said
        assert not any(_alive(pid) for pid in server)
    finally:
        if demo.poll() is None:
            server += _children(demo.pid)
            demo.kill()
        for pid in server:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
