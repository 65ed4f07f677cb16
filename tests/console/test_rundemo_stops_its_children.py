"""``manage.py rundemo`` stopped with SIGTERM (kill, a service manager) stops what it
started, as Ctrl-C does: no console server is left serving on its port."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

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


def test_sigterm_stops_the_server_it_started(tmp_path):
    env = {**os.environ, "GPUCONSOLE_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": "",
           "INPROCESS_SCHEDULER": "false"}
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True, timeout=300)
    port = _free_port()
    server: list[int] = []
    demo = subprocess.Popen([*manage, "rundemo", "--no-agents", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while "is running at" not in (line := demo.stdout.readline()):
            assert line and time.monotonic() < deadline, "rundemo did not start"
        server = _children(demo.pid)
        assert server and all(_alive(pid) for pid in server)
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) is not None
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in server)
    finally:
        if demo.poll() is None:
            server += _children(demo.pid)
            demo.kill()
        for pid in server:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
