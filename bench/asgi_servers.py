"""The ASGI servers the benchmarks can run the console under, one command line each.

- ``daphne``: what the console ships with (Twisted and autobahn; gpuconsole.serving bounds
  its websocket frames and buffering);
- ``uvicorn``: uvloop, httptools and the ``websockets`` library, frames bounded by
  ``--ws-max-size`` at the agent protocol's 512 KiB;
- ``granian``: Rust's hyper and tokio behind the ASGI interface (no lifespan: Django
  has none).

``floor-<server>`` runs ``bench/floor_server.py`` (the bare path every reading must take,
none of the console's bookkeeping) under that server instead of the console.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
APP = "gpuconsole.asgi:application"
MAX_MESSAGE_BYTES = 512 * 1024
SERVERS = ("daphne", "uvicorn", "granian")
FLOOR_APP = "floor_server:app"  # bench/ is on the server's PYTHONPATH (see env)


def is_floor(kind: str) -> bool:
    return kind.startswith("floor-")


def env(kind: str, base: dict) -> dict:
    """The server's environment: the floor application imports from bench/."""
    if not is_floor(kind):
        return base
    here = str(Path(__file__).resolve().parent)
    return base | {"PYTHONPATH": os.pathsep.join(filter(None, [here, base.get("PYTHONPATH")]))}


def command(server: str, port: int, app: str = APP) -> list[str]:
    if is_floor(server):
        server, app = server.removeprefix("floor-"), FLOOR_APP
    if server == "daphne":
        return [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), app]
    if server == "uvicorn":
        return [str(BIN / "uvicorn"), app, "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
                "--http", "httptools", "--ws", "websockets", "--ws-max-size", str(MAX_MESSAGE_BYTES),
                "--lifespan", "off", "--log-level", "warning", "--no-access-log"]
    if server == "granian":
        return [str(BIN / "granian"), "--interface", "asginl", "--host", "127.0.0.1", "--port", str(port),
                "--workers", "1", "--log-level", "warning", app]
    raise SystemExit(f"unknown server {server!r}: one of {', '.join(SERVERS)}")


def parse(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    for name in names:
        if name.removeprefix("floor-") not in SERVERS:
            raise SystemExit(f"unknown server {name!r}: one of {', '.join(SERVERS)}, each also as floor-<server>")
        if not (BIN / name.removeprefix("floor-")).exists():
            raise SystemExit(f"{name.removeprefix('floor-')} is not installed beside {sys.executable}: "
                             "pip install -e '.[bench]'")
    return names


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user and system) one process of this machine has used so far, or
    None when it cannot be read (gone, or elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU seconds of a server process and the processes under it (granian serves from
    a worker process of its own)."""
    own = process_cpu(pid)
    if own is None:
        return 0.0
    return own + sum(cpu_seconds(child) for child in children(pid))


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found
