"""The demo's jobs follow the product's rules: low-priority jobs hold only GPUs no
other instance holds, one yielded to a paying launch and resumed, one waits."""

import pytest
from django.db.models import Q

from billing import demo as billing_demo
from gpuconsole import demo as console_demo
from instances import demo as instances_demo
from instances.models import GpuHold
from jobs import demo, queue_status
from jobs.models import Job


@pytest.fixture
def seeded(db, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    users = console_demo.seed()
    instances_demo.seed_fleet(actor=users["ops"])
    billing_demo.seed_catalog(users=users)
    instances_demo.seed_instances(users=users)
    demo.seed(users=users)
    return users


def test_the_demo_jobs_tell_the_idle_capacity_story(seeded):
    jobs = {j.name: j for j in Job.objects.select_related("instance__host", "gpu_model")}
    info = queue_status.queue_info(list(jobs.values()))
    assert {n: j.state for n, j in jobs.items()} == {
        "tokenize-corpus": "finished", "nightly-eval": "running", "render-backfill": "running", "hparam-sweep": "queued"}
    assert [e.kind for e in jobs["nightly-eval"].events.all()] == ["submit", "start", "preempt", "resume"]
    for name in ("nightly-eval", "render-backfill"):
        assert not _overlapping_holds(jobs[name].instance), name
    assert info[jobs["hparam-sweep"].pk].reason.startswith("No idle capacity of H200-141GB")
    assert info[jobs["nightly-eval"].pk].cost > 0


def test_seeding_jobs_twice_adds_nothing(seeded):
    before = Job.objects.count()
    demo.seed(users=seeded)
    assert Job.objects.count() == before


def _overlapping_holds(instance) -> list:
    """Holds by other instances on this instance's GPUs at any time while it held them."""
    clash = []
    for hold in GpuHold.objects.filter(instance=instance):
        others = GpuHold.objects.filter(gpu=hold.gpu).exclude(instance=instance)
        if hold.end is not None:
            others = others.filter(start__lt=hold.end)
        clash += list(others.filter(Q(end__isnull=True) | Q(end__gt=hold.start)))
    return clash



def test_make_runs_seed_succeeds(tmp_path):
    """`make run`'s seed, as it runs there (its own process and database, after-commit work
    run in-process): the queue's pass that a preemption triggers must not give the yielded
    job back the GPUs its paying launch was waiting for."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["GPUCONSOLE_VAR_DIR"] = str(tmp_path)
    for step in (["migrate", "--noinput", "-v0"], ["seed_demo"]):
        done = subprocess.run([sys.executable, str(root / "manage.py"), *step], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
