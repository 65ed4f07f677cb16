"""What the benchmarks and the production-mode run share to drive a console from
outside: ports, waiting for a server, scratch PostgreSQL databases, and websocket
clients that talk as a browser (session cookie and the page's Origin) or as an agent
(bearer token) do.

Imported by bench/*.py (their directory is on ``sys.path``) and by
tests/production/production_mode.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from urllib.parse import urlsplit, urlunsplit

MAX_MESSAGE = 2**24  # a live ``gpus`` message of the whole fleet is large


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """``count`` different free ports: each socket stays bound until all are chosen (one
    at a time, the system may hand out the port it just took back)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until ``url`` answers; fails at once if ``proc`` (the server) exits."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"a server exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"no answer from {url}")


def stop(proc: subprocess.Popen | None, timeout: float = 10) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()


def scratch_database(url: str, prefix: str) -> tuple[str, str, str]:
    """(admin URL, name, URL) of a new database beside ``url``'s."""
    import psycopg

    parts = urlsplit(url)
    name = f"{prefix}_{os.getpid()}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin, name, urlunsplit(parts._replace(path="/" + name))


def drop_database(admin: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def browser(url: str, session: str, origin: str):
    """``async with browser(…) as ws``: a live socket as a signed-in page opens it."""
    from websockets.asyncio.client import connect

    return connect(url, additional_headers={"Cookie": f"sessionid={session}", "Origin": origin},
                   max_size=MAX_MESSAGE)


def agent(url: str, token: str, **options):
    """``async with agent(…) as ws``: an agent socket with its host token."""
    from websockets.asyncio.client import connect

    return connect(url, additional_headers={"Authorization": f"Bearer {token}"}, **options)


async def subscribe(ws, subscriptions: list[dict]) -> None:
    """Subscribe and wait until every subscription is answered."""
    for sub in subscriptions:
        await ws.send(json.dumps({"subscribe": sub}))
    answered = 0
    while answered < len(subscriptions):
        answered += json.loads(await ws.recv())["event"] == "subscribed"


def close_code(exc) -> int:
    """The close code a ``ConnectionClosed`` carries (1006: no close frame came)."""
    return exc.rcvd.code if exc.rcvd else 1006
