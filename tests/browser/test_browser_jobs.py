"""The job queue in the browser: bob queues a low-priority job from the page and it runs
in idle H100s; on-demand launches through the API take every other H100 host and the
next one reclaims the job's GPUs (notice, then preemption when the notice runs out);
the page says why it waits; once the paying instance ends, the job resumes."""

import json
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
# The notice (2 minutes) runs out: what the periodic preempt-due task does then.
NOTICE_RUNS_OUT = (
    "from datetime import timedelta\n"
    "from django.utils import timezone\n"
    "from instances import preemption\n"
    "preemption.preempt_due(now=timezone.now() + timedelta(minutes=3))\n"
)


def _api(console, path, body=None):
    try:
        return 200, console.api(path, body)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _row(page, name):
    page.goto(page.url.split("#")[0])
    return page.locator("#job-queue tr", has_text=name)


def test_a_low_priority_job_yields_to_an_on_demand_launch_and_resumes(console, login, screenshot):
    page = login("bob")
    page.click("nav >> text=Jobs")
    page.fill("#id_name", "browser-eval")
    page.fill("#id_command", "python eval.py --suite full")
    page.select_option("#id_gpu_model", "H100-80GB")
    page.fill("#id_gpu_count", "8")
    page.select_option("#id_priority", "low")
    page.click("#job-form button[type=submit]")
    row = page.locator("#job-queue tr", has_text="browser-eval")
    assert row.get_attribute("data-state") == "running"
    job = int(row.get_attribute("data-job"))
    mine = console.api(f"/api/v1/jobs/{job}/")["instance"]
    screenshot(page, "jobs-running")

    globex = next(t["id"] for t in console.api("/api/v1/teams/")["results"] if t["name"] == "Globex")
    launched, answer = [], None
    for k in range(10):  # take every other whole H100 host, until a launch finds none
        status, answer = _api(console, "/api/v1/instances/", {
            "team": globex, "name": f"globex-burst-{k}", "gpu_model": "H100-80GB", "gpu_count": 8,
            "pricing_model": "on_demand"})
        if status != 200:
            break
        launched.append(answer["id"])
    assert status == 409 and "given notice" in answer["detail"] and "browser-eval-run-1" in answer["detail"]
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-v0", "-c", NOTICE_RUNS_OUT],
                          cwd=ROOT, env=console.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    row = _row(page, "browser-eval")
    assert row.get_attribute("data-state") == "queued"
    assert "by a paying launch" in row.locator(".why").inner_text()
    screenshot(page, "jobs-preempted")

    status, paying = _api(console, "/api/v1/instances/", {
        "team": globex, "name": "globex-paying", "gpu_model": "H100-80GB", "gpu_count": 8,
        "pricing_model": "on_demand"})
    assert status == 200, paying
    assert console.api(f"/api/v1/instances/{mine}/")["host"] == paying["host"]
    console.api(f"/api/v1/instances/{paying['id']}/terminate/", {})
    row = _row(page, "browser-eval")
    assert row.get_attribute("data-state") == "running"
    page.click("text=browser-eval")
    events = page.locator("#job-events").inner_text()
    assert [k for k in ("Submitted", "Started", "Preempted", "Resumed") if k in events] == [
        "Submitted", "Started", "Preempted", "Resumed"]
    screenshot(page, "job-resumed")

    console.api(f"/api/v1/jobs/{job}/cancel/", {})  # leave the fleet as the other tests expect
    for pk in launched:
        console.api(f"/api/v1/instances/{pk}/terminate/", {})
