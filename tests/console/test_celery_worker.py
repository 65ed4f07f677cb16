"""With REDIS_URL set, tasks go through Redis to a real Celery worker."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from gpuconsole.celery import app as celery_app
from instances import lifecycle
from instances.models import GpuModel, Instance

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a real broker)")


@pytest.fixture
def worker(transactional_db, tmp_path):
    db = connection.settings_dict
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    if db["ENGINE"].endswith("sqlite3"):
        pytest.skip("a worker process cannot share the in-memory SQLite test database")
    env = os.environ | {"DATABASE_URL": url, "CELERY_TASK_ALWAYS_EAGER": "false"}
    # A queue of its own, so that no other worker on the same Redis takes the task.
    queue = f"test-{uuid.uuid4().hex}"
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gpuconsole", "worker", "--pool", "solo", "--loglevel", "WARNING",
             "--queues", queue, "--without-heartbeat", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    default_queue = celery_app.conf.task_default_queue
    celery_app.conf.task_always_eager = False
    celery_app.conf.task_default_queue = queue
    try:
        yield proc
    finally:
        celery_app.conf.task_always_eager = True
        celery_app.conf.task_default_queue = default_queue
        proc.terminate()
        proc.wait(timeout=20)
        print(log.read_text(errors="replace"))


def test_a_real_worker_provisions_a_launched_instance(worker, fleet, bob, acme):
    instance = lifecycle.launch_instance(
        actor=bob, team=acme, name="via-worker", gpu_model=GpuModel.objects.get(name="H100-80GB"),
        gpu_count=1, pricing_model="on_demand",
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if Instance.objects.get(pk=instance.pk).state == "running":
            break
        time.sleep(0.5)
    assert Instance.objects.get(pk=instance.pk).state == "running"
