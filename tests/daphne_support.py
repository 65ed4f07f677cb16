"""A real daphne serving a test ASGI application, for tests of what only the server
enforces (websocket message limits, push-back)."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 512 * 1024  # WEBSOCKET_MAX_MESSAGE_BYTES


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(application: str, path: Path) -> Iterator[str]:
    """daphne serving ``application`` ("module:attribute", importable from ``path``);
    yields its ws:// base URL once it accepts connections."""
    port = free_port()
    env = os.environ | {"PYTHONPATH": f"{ROOT}{os.pathsep}{path}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), application],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.2)
        yield f"ws://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
