"""Every page counts the same way: a GPU is used when it or any of its slices is held;
"running" instances are the running ones, not pending or stopping."""

import pytest
from django.test import Client

from instances import lifecycle as instance_lifecycle

pytestmark = pytest.mark.django_db


def page(user, url):
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.context


def test_fleet_and_hosts_count_a_gpu_with_a_held_slice_as_used(ops, launch, charlie, globex, fleet):
    launch(charlie, globex, name="nb", model="A100-80GB", slice_profile=fleet["mig"])
    fleet_hosts = {s["host"].name: s for r in page(ops, "/")["regions"] for s in r["hosts"]}
    hosts = {h.name: h for h in page(ops, "/hosts/")["hosts"]}
    assert (fleet_hosts["a100-mig"]["used"], fleet_hosts["a100-mig"]["gpus"]) == (1, 2)
    assert (hosts["a100-mig"].gpus_used, hosts["a100-mig"].gpu_count) == (1, 2)
    capacity = {r["model"]: r for r in page(ops, "/")["capacity"]}
    # The other GPU is unused but in MIG mode: not a free whole GPU (test_free_capacity_agrees).
    assert (capacity["A100-80GB"]["used"], capacity["A100-80GB"]["free"], capacity["A100-80GB"]["other"]) == (1, 0, 1)


def test_running_instances_leave_out_pending_and_stopping(bob, acme, launch, acme_instance):
    launch(bob, acme, name="waiting")
    stopping = instance_lifecycle.mark_running(instance=launch(bob, acme, name="going"))
    instance_lifecycle.stop_instance(actor=bob, instance=stopping, finish=False)
    context = page(bob, "/")
    assert context["running_count"] == 1
    assert len(context["instances"]) == 3
