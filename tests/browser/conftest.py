"""A real console for the browser tests: daphne (websockets and all) on a free port
against its own database, seeded with the demo, with the replay agent streaming the
recorded H200 trace, and Debian's Chromium driven by Playwright.

Without /usr/bin/chromium only these tests are skipped (CI sets CI_REQUIRE_BROWSER=1
and fails instead). Screenshots go to test-artifacts/browser/.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("GPUCONSOLE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TRACE = ROOT / "agent" / "traces" / "h200_mixed.jsonl"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
REPLAY_HOST = "use1-h200-replay"
PASSWORD = "demo"
BIN = Path(sys.executable).parent

# The demo's teams, users, fleet and instances, and 24 hours of 1-minute rollups for
# the replayed GPU so that a 24 h chart has history. (seed_demo also generates two days
# of history for every GPU and a billing history: a minute of work the tests never read.)
SEED = """
import math
from billing import demo as billing_demo
from gpuconsole import demo as console_demo
from instances import demo as instances_demo
users = console_demo.seed()
instances_demo.seed_fleet(actor=users["ops"])
billing_demo.seed_catalog(users=users)  # a launch needs a price
instances_demo.seed_instances(users=users)
from datetime import timedelta
from django.utils import timezone
from instances.models import Gpu
from monitoring.models import Rollup1m
gpu = Gpu.objects.get(host__name={host!r})
now = timezone.now().replace(second=0, microsecond=0)
rows = []
for k in range(1, 24 * 60):
    bucket = now - timedelta(minutes=k)
    busy = 50 + 45 * math.sin(k / 90.0)
    rows.append(Rollup1m(
        gpu=gpu, instance_id=gpu.instance_id, team_id=gpu.team_id, bucket=bucket, samples=60, observed_s=60.0,
        gpu_util_min=max(busy - 20, 0), gpu_util_avg=busy, gpu_util_max=min(busy + 5, 100),
        tensor_active_pct_min=0, tensor_active_pct_avg=busy * 0.8, tensor_active_pct_max=busy,
        mem_used_min=50e9, mem_used_avg=60e9, mem_used_max=70e9,
        power_mw_min=100e3, power_mw_avg=150e3 + 5e3 * busy, power_mw_max=690e3,
        temp_c_min=35, temp_c_avg=40 + busy / 4, temp_c_max=70,
        sm_clock_mhz_min=345, sm_clock_mhz_avg=1500, sm_clock_mhz_max=1980,
    ))
Rollup1m.objects.bulk_create(rows)
"""


MISSING = (
    f"Chromium not found at {CHROMIUM}: the browser tests need Debian's Chromium "
    "(sudo apt-get install -y chromium); Playwright never downloads a browser here."
)


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "tests/browser/" in r.nodeid]
    if skipped and not CHROMIUM.exists():
        terminalreporter.write_line(f"{len(skipped)} browser tests skipped. {MISSING}", yellow=True)


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    message = MISSING
    if os.environ.get("CI_REQUIRE_BROWSER") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _own_database(url: str) -> tuple[str, str]:
    """(url of a fresh database beside ``url``'s, its name): the browser server's own."""
    parts = urlsplit(url)
    name = (parts.path.lstrip("/") or "test") + "_browser" + os.environ.get("PYTEST_XDIST_WORKER", "")
    return urlunsplit(parts._replace(path="/" + name)), name


def _recreate_pg(url: str, name: str, *, drop_only: bool = False) -> None:
    import psycopg

    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{name}"')


def _own_redis(url: str) -> str:
    # A database of its own, so that live groups never mix with another server's (one
    # for each pytest-xdist worker).
    parts = urlsplit(url)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return urlunsplit(parts._replace(path=f"/{9 + int(worker.removeprefix('gw'))}"))


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the console exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the console did not answer {url} within {timeout:.0f} s")


def _api(base: str, path: str, body: dict | None = None, token: str | None = None) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


class Console:
    """The running console: its base URL, an operator's API token, and its server
    process, which a test may restart."""

    def __init__(self, base: str, port: int, env: dict, logs: Path):
        self.base = base
        self.port = port
        self.env = env
        self.logs = logs
        self.server: subprocess.Popen | None = None
        self.ops_token = ""

    def start(self) -> None:
        self.server = subprocess.Popen(
            [
                str(BIN / "daphne"),
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "gpuconsole.asgi:application",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=open(self.logs / "daphne.log", "a"),
            stderr=subprocess.STDOUT,
        )
        _wait_http(self.base + "/healthz", self.server)

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()

    def restart(self) -> None:
        """A crash and a fresh start on the same port."""
        self.server.kill()
        self.server.wait()
        self.start()

    def api(self, path: str, body: dict | None = None) -> dict:
        return _api(self.base, path, body, self.ops_token)


@pytest.fixture(scope="session")
def console(tmp_path_factory):
    _require_chromium()
    if not TRACE.exists():
        pytest.skip(f"the recorded trace is missing at {TRACE}")
    var = tmp_path_factory.mktemp("console")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {
        "GPUCONSOLE_VAR_DIR": str(var),
        "INPROCESS_SCHEDULER": "true",
        "CELERY_TASK_ALWAYS_EAGER": "true",
        "DEBUG": "true",
        "PYTHONUNBUFFERED": "1",
        "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{port}",
    }
    database = None
    if os.environ.get("DATABASE_URL"):
        url, name = _own_database(os.environ["DATABASE_URL"])
        _recreate_pg(url, name)
        env["DATABASE_URL"], database = url, (url, name)
    if os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = _own_redis(os.environ["REDIS_URL"])
    manage = [sys.executable, str(ROOT / "manage.py")]
    logs = var / "logs"
    logs.mkdir()
    for step in (
        ["migrate", "--noinput", "-v0"],
        ["shell", "-v0", "-c", SEED.format(host=REPLAY_HOST)],
    ):
        done = subprocess.run(
            manage + step, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
        )
        if done.returncode:
            raise RuntimeError(
                f"manage.py {step[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
            )
    console = Console(f"http://127.0.0.1:{port}", port, env, logs)
    agent = None
    try:
        console.start()
        console.ops_token = _api(
            console.base,
            "/api/v1/auth/token/",
            {"username": "ops", "password": PASSWORD, "name": "browser-tests"},
        )["token"]
        host_token = console.api(
            "/api/v1/host-tokens/", {"host": REPLAY_HOST, "name": "browser-tests"}
        )["token"]
        agent = subprocess.Popen(
            [
                str(BIN / "gpuconsole-agent"),
                "--server",
                f"ws://127.0.0.1:{port}/ws/agent/",
                "--backend",
                "replay",
                "--trace",
                str(TRACE),
                "--speed",
                "4",
                "--host",
                REPLAY_HOST,
                "--spool-dir",
                str(var / "spool"),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env | {"GPUCONSOLE_AGENT_TOKEN": host_token},
            stdout=open(logs / "agent.log", "w"),
            stderr=subprocess.STDOUT,
        )
        yield console
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
        console.stop()
        if database:
            _recreate_pg(*database, drop_only=True)


@pytest.fixture(scope="session")
def chromium():
    # One Playwright for the whole session (its sync API cannot run twice at once);
    # the demo of test_browser_every_page_each_role shares it without this console.
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def sessions(console, chromium):
    """{username: Playwright storage state}: each user logs in through the form once."""
    states = {}

    def _state(username: str) -> dict:
        if username not in states:
            context = chromium.new_context()
            page = context.new_page()
            page.goto(console.base + "/login/")
            page.fill("input[name=username]", username)
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(re.compile(r"/$"))
            states[username] = context.storage_state()
            context.close()
        return states[username]

    return _state


@pytest.fixture
def login(console, chromium, sessions):
    """A page on the overview, logged in as a demo user; closed after the test."""
    contexts = []

    def _login(username: str, width: int = 1400):
        context = chromium.new_context(
            viewport={"width": width, "height": 900}, storage_state=sessions(username)
        )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(console.base + "/")
        return page

    yield _login
    for context in contexts:
        context.close()


@pytest.fixture
def screenshot():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def _shot(page, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return _shot


@pytest.fixture
def chart_points():
    return _chart_points


def _chart_points(page, chart: str, metric: str = "gpu_util") -> int:
    """How many readings the chart's line of ``metric`` holds now."""
    return page.evaluate(
        """([chart, metric]) => {
            const plot = document.querySelector(`[data-chart="${chart}"]`);
            if (!plot || !plot.data) return -1;
            const trace = plot.data.find(t => t.meta && t.meta.metric === metric && !t.meta.envelope);
            return trace ? trace.x.filter((x, i) => trace.y[i] !== null).length : -1;
        }""",
        [chart, metric],
    )
