"""An ended instance as its team sees it: no "live" pill, and its charts' legends keep
the names they had while it ran (gpu2 · H100-80GB), not the GPUs' UUIDs."""

import re
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.browser

# Two hours of readings for the GPUs acme-spot-sweep held before it was preempted.
HISTORY = """
from datetime import timedelta
from django.utils import timezone
from instances.models import GpuHold, Instance
from monitoring.models import Rollup1h
instance = Instance.objects.get(name="acme-spot-sweep")
hour = timezone.now().replace(minute=0, second=0, microsecond=0)
Rollup1h.objects.bulk_create(
    Rollup1h(gpu_id=h.gpu_id, instance=instance, team=instance.team, bucket=hour - timedelta(hours=k), samples=3600,
             observed_s=3600, gpu_util_min=10, gpu_util_avg=50 + k, gpu_util_max=90)
    for h in GpuHold.objects.filter(instance=instance) for k in (1, 2)
)
print(instance.pk)
"""


@pytest.fixture(scope="module")
def ended(console):
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-v0", "-c", HISTORY], cwd=ROOT,
                          env=console.env, capture_output=True, text=True, check=True, timeout=120)
    return int(done.stdout.split()[-1])


def test_an_ended_instance_has_no_live_pill_and_keeps_its_legends(login, console, ended, screenshot):
    page = login("bob")
    page.goto(f"{console.base}/instances/{ended}/")
    assert page.locator("[data-live-status]").count() == 0
    assert page.inner_text("#not-live") == "preempted"
    page.click("#instance-charts button[data-range='7d']")
    page.wait_for_function(
        """() => [...document.querySelectorAll('#instance-charts [data-chart]')]
                 .some(p => p.data && p.data.some(t => t.name && t.name.startsWith('gpu')))"""
    )
    names = page.evaluate(
        """() => [...new Set([...document.querySelectorAll('#instance-charts [data-chart]')]
                 .flatMap(p => (p.data || []).map(t => t.name || '')))]"""
    )
    screenshot(page, "instance-ended")
    legends = [name for name in names if name.startswith("gpu")]
    assert len(legends) == 2 and all(re.match(r"gpu\d · H100-80GB$", name) for name in legends), names
    assert not any("GPU-" in name for name in names), names
