"""Every page of the navigation, as each demo user, on a demo that has run half an hour
(seed_demo, then rundemo: the console with its periodic work and the demo's agents):
each page answers 200, is not an error page, and neither it nor anything it loads
answers 5xx or logs a console error.

The demo is seeded DEMO_PLAYED_MINUTES (default 30) ago and played forward to now by
``gpuconsole.demo_clock.advance``: every spot market step, preemption, queue pass, scaling
decision, failed boot and metering run that half hour of ``make run`` would have made.
Then it runs for real, its agents streaming, for DEMO_RUN_MINUTES (default 0.5) before
the pages are read."""

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    ARTIFACTS,
    PASSWORD,
    ROOT,
    _free_port,
    _own_database,
    _recreate_pg,
    _require_chromium,
    _wait_http,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeout

# A module's first test starts the shared demo and its owner's last one waits for the other
# workers' readers before stopping it (``_shared``): more than the suite's 300 s a test.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

USERS = ("alice", "bob", "charlie", "audrey", "ops")
PLAYED = """
import io, os
from datetime import timedelta
from unittest import mock
from django.core.management import call_command
from django.utils import timezone
from gpuconsole import demo_clock
end = timezone.now().replace(microsecond=0)
start = end - timedelta(minutes=float(os.environ.get("DEMO_PLAYED_MINUTES", "30")))
real, shift = timezone.now, timezone.now() - start
with mock.patch("django.utils.timezone.now", lambda: real() - shift):
    call_command("seed_demo", stdout=io.StringIO())
demo_clock.advance(start=start, end=end)
"""
PERIODIC = """
from gpuconsole.schedule import _resolve, entries
for name, (seconds, path) in entries().items():
    _resolve(path)()
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The base URL of a demo seeded and run as `make run` does, after it has run: one
    for all the workers that read pages of this module (``_shared``)."""
    _require_chromium()
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # one process
        with _demo_running(tmp_path_factory) as base:
            yield base
        return
    with _shared(tmp_path_factory.getbasetemp().parent / "every-page-demo", tmp_path_factory) as base:
        yield base


@contextlib.contextmanager
def _shared(folder: Path, tmp_path_factory) -> Iterator[str]:
    """The first worker to arrive starts the demo (the others wait on the lock meanwhile)
    and stops it once no worker reads it any more; a worker arriving after that starts
    one of its own. One demo instead of one a worker: a demo costs a minute and more to
    seed and, running, a share of the two cores every page read waits for."""
    folder.mkdir(exist_ok=True)
    state_file = folder / "state.json"

    @contextlib.contextmanager
    def locked() -> Iterator[dict]:
        with open(folder / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(state_file.read_text()) if state_file.exists() else {"base": None, "readers": 0}
            yield state
            state_file.write_text(json.dumps(state))

    with contextlib.ExitStack() as owned:
        with locked() as state:
            owner = state["base"] is None
            if owner:  # started here, while the others wait for the lock
                state["base"] = owned.enter_context(_demo_running(tmp_path_factory))
            state["readers"] += 1
            base = state["base"]
        try:
            yield base
        finally:
            with locked() as state:
                state["readers"] -= 1
            deadline = time.monotonic() + 600
            while owner and time.monotonic() < deadline:  # the owner stops it after the last reader
                with locked() as state:
                    if state["readers"] == 0:
                        state["base"] = None  # a late arrival starts its own
                        break
                time.sleep(0.5)


@contextlib.contextmanager
def _demo_running(tmp_path_factory) -> Iterator[str]:
    var = tmp_path_factory.mktemp("demo")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {"GPUCONSOLE_VAR_DIR": str(var), "INPROCESS_SCHEDULER": "true", "CELERY_TASK_ALWAYS_EAGER": "true",
            "PYTHONUNBUFFERED": "1", "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{port}"}
    database = None
    if os.environ.get("DATABASE_URL"):
        url, name = _own_database(os.environ["DATABASE_URL"])
        url, name = url + "_demo", name + "_demo"
        _recreate_pg(url, name)
        env["DATABASE_URL"], database = url, (url, name)
    manage = [sys.executable, str(ROOT / "manage.py")]
    for step in (["migrate", "--noinput", "-v0"], ["shell", "-v0", "-c", PLAYED], ["shell", "-v0", "-c", PERIODIC]):
        done = subprocess.run(manage + step, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{step[0]}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    log = open(var / "rundemo.log", "w")
    server = subprocess.Popen(manage + ["rundemo", "--port", str(port)], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(base + "/healthz", server, timeout=90)
        time.sleep(60 * float(os.environ.get("DEMO_RUN_MINUTES", "0.5")))
        assert server.poll() is None, (var / "rundemo.log").read_text()[-4000:]
        yield base
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        if database:
            _recreate_pg(*database, drop_only=True)


def nav_paths(page, selector: str) -> list[str]:
    hrefs = page.eval_on_selector_all(f"{selector} a[href]", "els => els.map(a => a.getAttribute('href'))")
    return [h for h in hrefs if h.startswith("/") and not h.startswith("/logout")]


def read(page, base: str, path: str) -> list[str]:
    """Open ``path``; the problems seen (status, error page, 5xx, console errors)."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("response", lambda r: problems.append(f"{r.status} from {r.url}") if r.status >= 500 else None)
    response = page.goto(base + path, wait_until="load")
    if response is None or response.status != 200:
        problems.append(f"answered {response.status if response else 'nothing'}")
    try:  # the page's own requests (charts, live) come after load
        page.wait_for_load_state("networkidle", timeout=1500)
    except PlaywrightTimeout:  # a page that keeps polling has shown its first answers by now
        pass
    if page.locator("main .card h1").filter(has_text=re.compile(r"^\d{3}$")).count():
        problems.append("an error page")
    return problems


@pytest.mark.parametrize("username", USERS)
def test_every_page_of_the_nav_opens_cleanly(demo, chromium, username):
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(demo + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    paths = list(dict.fromkeys(nav_paths(page, "nav[aria-label=Main]") + nav_paths(page, ".topbar")))
    seen, problems = set(), {}
    while paths:
        path = paths.pop(0).split("#")[0]
        if path in seen:
            continue
        seen.add(path)
        tab = context.new_page()
        found = read(tab, demo, path)
        paths += [p for p in nav_paths(tab, "nav.tabs") if p not in seen]  # a section's own tabs
        shots = ARTIFACTS / "every-page"
        shots.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(shots / f"{username}{re.sub(r'[^A-Za-z0-9-]', '_', path)}.png"), full_page=True)
        tab.close()
        if found:
            problems[path] = found
    context.close()
    assert len(seen) >= 5, seen
    assert not problems, f"{username}: {problems}"
