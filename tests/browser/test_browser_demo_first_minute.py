"""The demo's first minute, as `make run` plays it: the simulated fleet follows the
console, so free and pending GPUs idle with no processes, a launch makes its GPU busy
within seconds and a stop makes it idle, and a MIG slice is charted like a GPU."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BIN, PASSWORD, ROOT, _api

pytestmark = pytest.mark.browser

WRITE_FLEET = """
from django.contrib.auth.models import User
from instances.models import Host
from monitoring import demo
# The hosts this story touches (a launch of one H100, the MIG host): a lighter fleet.
from django.db.models import Q
hosts = Host.objects.filter(Q(kind="mig") | Q(kind="passthrough", gpus__model__name="H100-80GB")).distinct()
hosts = hosts.prefetch_related("gpus__model", "gpus__slices__profile")
demo._write_tokens(User.objects.get(username="ops"), list(hosts))
"""


@pytest.fixture(scope="module")
def sim_fleet(console):
    """The demo's sim agent, following allocations, every 2 s."""
    var = console.env["GPUCONSOLE_VAR_DIR"]
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-v0", "-c", WRITE_FLEET],
                   cwd=ROOT, env=console.env, check=True, timeout=120)
    agent = subprocess.Popen(
        [str(BIN / "gpuconsole-agent"), "--server", f"ws://127.0.0.1:{console.port}/ws/agent/", "--backend", "sim",
         "--fleet", f"{var}/agent-fleet.json", "--follow-allocations", "--interval", "2", "--slow-interval", "4", "--spool-dir", f"{var}/sim-spool",
         "--log-level", "warning"],
        cwd=ROOT, env=console.env, stdout=open(console.logs / "sim.log", "w"), stderr=subprocess.STDOUT,
    )
    yield agent
    agent.terminate()
    try:
        agent.wait(timeout=10)
    except subprocess.TimeoutExpired:
        agent.kill()


def latest(console) -> dict[str, dict]:
    rows = console.api("/api/v1/gpu-latest/?page_size=500")
    rows = rows["results"] if isinstance(rows, dict) else rows
    return {r["uuid"]: r for r in rows}


@pytest.fixture
def slow_login(console, chromium, sessions):
    """``login`` with room for a busy machine: this story runs a sim fleet beside the server."""
    contexts = []

    def _login(username: str):
        context = chromium.new_context(viewport={"width": 1400, "height": 900}, storage_state=sessions(username))
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(60_000)
        return page

    yield _login
    for context in contexts:
        context.close()


def wait_for(check, timeout=60.0, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def test_the_demos_first_minute(console, sim_fleet, slow_login, screenshot):
    # Free GPUs idle, with no processes; so does the pending instance's.
    fleet = json.loads((Path(console.env["GPUCONSOLE_VAR_DIR"]) / "agent-fleet.json").read_text())

    def settled():  # every host of the sim fleet has reported (they need not all store at once)
        rows = latest(console)
        return rows if len(rows) > 40 and {h["host"] for h in fleet} <= {r["host"] for r in rows.values()} else None

    rows = wait_for(settled, what="the sim fleet reports")
    # (A GPU of a MIG or vGPU host is held through its slices: it is not free.)
    free = [r for r in rows.values() if r["instance"] is None and r["uuid"].startswith("GPU-")
            and "-mig-" not in r["host"] and "-vgpu-" not in r["host"]]
    busy = [(r["host"], r["metrics"].get("gpu_util"), r["metrics"].get("power_mw")) for r in free
            if r["metrics"].get("gpu_util") != 0]
    assert free and not busy

    # A launch makes its GPU busy within seconds.
    token = _api(console.base, "/api/v1/auth/token/", {"username": "alice", "password": PASSWORD, "name": "first-minute"})["token"]

    def as_alice(path, body=None, method=None):
        import urllib.request

        request = urllib.request.Request(
            console.base + path, data=None if body is None else json.dumps(body).encode(), method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Token {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"{}")

    launched = as_alice("/api/v1/instances/", {"name": "acme-first-train", "gpu_model": "H100-80GB", "gpu_count": 1,
                                                "pricing_model": "on_demand", "team": _team_id(as_alice, "Acme")})
    page = slow_login("alice")
    page.goto(f"{console.base}/instances/{launched['id']}/")
    page.wait_for_function(
        """() => {
            const plot = document.querySelector('[data-chart="utilization"]');
            if (!plot || !plot.data) return false;
            return plot.data.some(t => t.meta && t.meta.metric === 'gpu_util' && (t.y || []).some(v => v !== null && v > 50));
        }""",
        timeout=60_000,
    )
    screenshot(page, "demo-launch-busy")

    # A stop makes it idle.
    as_alice(f"/api/v1/instances/{launched['id']}/stop/", {}, method="POST")
    uuid = launched["gpus"][0]
    wait_for(lambda: latest(console)[uuid]["metrics"].get("gpu_util") == 0, what="the stopped GPU idles")

    # The MIG slice of acme-notebook is charted like a GPU, on the requested range: its
    # memory (an A100's slice reports no activity: NVML has no utilization on MIG
    # devices and no GPM before Hopper).
    page.goto(console.base + "/instances/")
    page.click("text=acme-notebook")
    page.wait_for_function(
        """() => {
            const plot = document.querySelector('[data-chart="memory"]');
            if (!plot || !plot.data || !plot.layout) return false;
            const t = plot.data.find(t => t.meta && t.meta.metric === 'mem_used' && !t.meta.envelope);
            return t && (t.y || []).some(v => v !== null);
        }""",
        timeout=60_000,
    )
    years = page.evaluate(
        "() => [...document.querySelectorAll('[data-chart]')].map(p => String((p.layout.xaxis.range || [''])[0]).slice(0, 4))"
    )
    assert "2000" not in years
    screenshot(page, "demo-mig-slice")


def _team_id(as_alice, name):
    teams = as_alice("/api/v1/teams/")
    teams = teams["results"] if isinstance(teams, dict) else teams
    return next(t["id"] for t in teams if t["name"] == name)


def test_a_multi_gpu_instance_overlays_its_gpus_with_a_toggle_to_one(console, sim_fleet, slow_login, screenshot):
    page = slow_login("bob")
    page.goto(console.base + "/instances/")
    page.click("text=acme-inference-a")
    page.wait_for_function(
        """() => {
            const plot = document.querySelector('[data-chart="utilization"]');
            return plot && plot.data && plot.data.length === 2 && plot.data.every(t => (t.y || []).some(v => v !== null));
        }""",
        timeout=60_000,
    )
    names = page.evaluate("() => document.querySelector('[data-chart=\"power\"]').data.map(t => t.name)")
    assert len(names) == 2 and all(n.startswith("gpu") for n in names)
    screenshot(page, "demo-overlay")
    page.select_option("select[aria-label=Device]", "0")
    page.wait_for_function(
        "() => document.querySelector('[data-chart=\"utilization\"]').data.some(t => t.name === 'Tensor-core activity')"
    )
    page.goto(console.base + "/")
    screenshot(page, "demo-overview")
