"""The instance page lists its processes with name, user, command, container and SM use."""

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from monitoring.catalog import RAW_METRICS
from monitoring.ingest import insert_samples

pytestmark = pytest.mark.django_db


def add(gpu, instance, when, procs):
    insert_samples([(when, gpu.pk, None, instance.pk, instance.team_id, json.dumps(procs),
                     *(None for _ in RAW_METRICS))])


def test_processes_carry_who_runs_them(bob, acme_instance):
    gpu = acme_instance.gpus.order_by("index").first()
    now = timezone.now()
    proc = {"pid": 77, "used_memory": 8 * 2**30, "name": "python3", "user": "bob", "cmd": "python3 train.py",
            "cgroup": "3f1c9a7e5b2d"}
    add(gpu, acme_instance, now - timedelta(seconds=60), [proc | {"sm_util": 64}])  # counter read
    add(gpu, acme_instance, now - timedelta(seconds=1), [proc])  # newest fast read
    client = Client()
    client.force_login(bob)
    rows = client.get(f"/monitoring/instances/{acme_instance.pk}/panel/").json()["procs"][gpu.uuid]
    assert [(r["pid"], r["name"], r["user"], r["cmd"], r["cgroup"], r["sm_util"], r["gib"]) for r in rows] == [
        (77, "python3", "bob", "python3 train.py", "3f1c9a7e5b2d", 64, 8.0)]


def test_another_team_gets_no_panel(charlie, acme_instance):
    client = Client()
    client.force_login(charlie)
    assert client.get(f"/monitoring/instances/{acme_instance.pk}/panel/").status_code == 404
