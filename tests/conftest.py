"""Shared fixtures. Every test world has an owner, a teammate and an outsider:
alice (Acme admin), bob (Acme member), charlie (Globex admin), audrey (auditor of
both teams) and ops (operator)."""

import os
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import pytest
from channels.layers import channel_layers
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.cache import cache
from rest_framework.test import APIClient

from console.models import Membership, Team
from gpuconsole.celery import app as celery_app
from instances import lifecycle as instance_lifecycle
from instances.models import (
    Gpu,
    GpuModel,
    GpuSlice,
    Host,
    HostKind,
    Region,
    SliceKind,
    SliceProfile,
)


def xdist_worker_number() -> int | None:
    """This process's number under pytest-xdist (gw0 is 0), or None when it runs alone."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else None


def _redis_of_this_worker() -> None:
    """Under pytest-xdist each worker talks to a Redis database of its own (1 + its
    number), so that no worker hears another's live groups, cache keys, leases or
    tasks: the URL is rewritten on the settings already loaded (before any client is
    made) and in the environment the servers a test starts inherit."""
    number = xdist_worker_number()
    if number is None or not django_settings.REDIS_URL:
        return
    if number > 6:  # Redis has 16 databases: 1-7 for workers, 9-15 for their browser servers
        raise pytest.UsageError("with REDIS_URL the suite runs in at most 7 workers (-n 7)")
    own = urlunsplit(urlsplit(django_settings.REDIS_URL)._replace(path=f"/{1 + number}"))
    os.environ["REDIS_URL"] = django_settings.REDIS_URL = django_settings.CELERY_BROKER_URL = own
    django_settings.CACHES["default"]["LOCATION"] = own
    for host in django_settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]:
        host["address"] = own


_redis_of_this_worker()

# pytest-django loads the settings before this file, so these are set on the objects:
# tasks run inline (also when REDIS_URL points the rest at real services), and no
# scheduler thread starts when a test imports the ASGI application.
celery_app.conf.task_always_eager = True
django_settings.INPROCESS_SCHEDULER = False


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _own_audit_heads(settings, tmp_path):
    """Each test publishes its tree heads to a file of its own (its database is its own)."""
    from audit import publish

    settings.AUDIT_HEADS_FILE = str(tmp_path / "audit-heads.jsonl")
    settings.AUDIT_PUBLISH_IN_THREAD = False  # published by the committing test itself
    publish.forget()
    yield
    publish.forget()


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()
    yield
    cache.clear()


def forget_channel_layers() -> None:
    """Drop the process's channel layers: the next ``get_channel_layer()`` makes a new one.

    A layer outlives event loops while each test runs in a loop of its own, and
    channels-redis keeps per-channel ``asyncio`` locks on the layer. A receive cancelled
    while it waited for one (its test's loop ending) never gives its count back, so the
    lock stays, bound to that dead loop, and the next test whose receives contend for it
    fails with "bound to a different event loop". One layer per test, as each server
    process has one loop for its layer's life."""
    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def _own_channel_layer():
    yield
    forget_channel_layers()


@pytest.fixture(scope="module")
def seeded_demo_module(django_db_setup, django_db_blocker, tmp_path_factory):
    """``seed_demo`` once for a whole module (its tests only read the demo, or change it
    inside their own transaction): seeded inside a transaction that is rolled back after
    the module's last test, each test's own transaction a savepoint within it (once
    for each worker that runs some of the module's tests)."""
    import io

    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test import override_settings

    heads = tmp_path_factory.mktemp("seeded-demo") / "audit-heads.jsonl"
    demo_settings = override_settings(
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        AUDIT_HEADS_FILE=str(heads), AUDIT_PUBLISH_IN_THREAD=False,
    )
    outer = transaction.atomic()
    with demo_settings, django_db_blocker.unblock():  # database access only to seed, as each test has its own
        outer.__enter__()
        call_command("seed_demo", stdout=io.StringIO(), stderr=io.StringIO())
        connection.check_constraints()  # the deferred checks of the seeded rows, once, not after each test
        connection.run_on_commit = []  # the seeding's hooks never run (rolled back); the tests register their own
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def _user(username, staff=False):
    return User.objects.create_user(username, f"{username}@example.com", "demo-password", is_staff=staff)


@pytest.fixture
def acme(db):
    return Team.objects.create(name="Acme", slug="acme")


@pytest.fixture
def globex(db):
    return Team.objects.create(name="Globex", slug="globex")


@pytest.fixture
def alice(acme):
    user = _user("alice")
    Membership.objects.create(team=acme, user=user, role="admin")
    return user


@pytest.fixture
def bob(acme):
    user = _user("bob")
    Membership.objects.create(team=acme, user=user, role="member")
    return user


@pytest.fixture
def charlie(globex):
    user = _user("charlie")
    Membership.objects.create(team=globex, user=user, role="admin")
    return user


@pytest.fixture
def audrey(acme, globex):
    user = _user("audrey")
    Membership.objects.create(team=acme, user=user, role="auditor")
    Membership.objects.create(team=globex, user=user, role="auditor")
    return user


@pytest.fixture
def ops(db):
    return _user("ops", staff=True)


@pytest.fixture
def fleet(db):
    """us-east-1: h100-a and h100-b (8 × H100 each), a100-mig (2 × A100 in 7 MIG slices),
    h200-a (1 × H200)."""
    region = Region.objects.create(name="us-east-1")
    h100 = GpuModel.objects.create(name="H100-80GB", memory_gb=80, power_limit_w=700)
    a100 = GpuModel.objects.create(name="A100-80GB", memory_gb=80, power_limit_w=400)
    h200 = GpuModel.objects.create(name="H200-141GB", memory_gb=141, power_limit_w=700)
    mig = SliceProfile.objects.create(gpu_model=a100, kind=SliceKind.MIG, name="1g.10gb", memory_gb=10, slices_per_gpu=7)
    hosts = {}
    for name, model, count, kind in [
        ("h100-a", h100, 8, HostKind.PASSTHROUGH),
        ("h100-b", h100, 8, HostKind.PASSTHROUGH),
        ("a100-mig", a100, 2, HostKind.MIG),
        ("h200-a", h200, 1, HostKind.PASSTHROUGH),
    ]:
        host = hosts[name] = Host.objects.create(name=name, region=region, kind=kind, nvlink_group=f"{name}-nvl")
        for index in range(count):
            gpu = Gpu.objects.create(
                host=host, index=index, uuid=f"GPU-{name}-{index}", model=model, memory_total=model.memory_gb * 1024**3
            )
            if kind == HostKind.MIG:
                for k in range(7):
                    GpuSlice.objects.create(gpu=gpu, profile=mig, uuid=f"MIG-{name}-{index}-{k}", gpu_instance_id=k + 1)
    _price_list(["H100-80GB", "A100-80GB", "H200-141GB", "A100-80GB:mig:1g.10gb"], spot=["H100-80GB", "A100-80GB", "H200-141GB"])
    return {"region": region, "h100": h100, "a100": a100, "h200": h200, "mig": mig, "hosts": hosts}


def _price_list(skus, spot):
    """A launch needs a price in effect: a flat list since 2000 (tests of billing set
    their own catalog from 2026, which cuts this one there)."""
    from billing import price_changes as billing_price_changes

    since = datetime(2000, 1, 1, tzinfo=UTC)
    for sku in skus:
        billing_price_changes.set_price(actor="system", sku=sku, kind="on_demand", hourly="1.00", effective_from=since, now=since)
    for sku in spot:
        billing_price_changes.set_spot_price(actor="system", sku=sku, hourly="0.40", now=since)


@pytest.fixture
def launch(fleet):
    """Launch an instance through the service, as ``actor`` for ``team``; runs at once."""

    def _launch(actor, team, name="job", model="H100-80GB", count=1, pricing="on_demand", **kwargs):
        return instance_lifecycle.launch_instance(
            actor=actor, team=team, name=name, gpu_model=GpuModel.objects.get(name=model), gpu_count=count,
            pricing_model=pricing, provision=False, **kwargs,
        )

    return _launch


@pytest.fixture
def image_catalog(fleet, ops, acme):
    """pytorch (public, the default of every model), tensorflow (public, H100 only),
    old-cuda (public, retired) and acme-private (Acme's own, H100 and A100)."""
    from instances import images

    h100, a100, h200 = fleet["h100"], fleet["a100"], fleet["h200"]
    made = {
        "pytorch": images.create_image(actor=ops, name="pytorch", reference="nvcr.io/nvidia/pytorch:24.10-py3",
                                       gpu_models=[h100, a100, h200], default_for=[h100, a100, h200],
                                       framework="PyTorch", cuda_version="12.6", size_bytes=10_000_000_000),
        "tensorflow": images.create_image(actor=ops, name="tensorflow", gpu_models=[h100],
                                          reference="nvcr.io/nvidia/tensorflow:24.10-tf2-py3"),
        "old-cuda": images.create_image(actor=ops, name="old-cuda", reference="nvcr.io/nvidia/pytorch:23.05-py3",
                                        gpu_models=[h100, a100]),
        "acme-private": images.create_image(actor=ops, name="acme-private", team=acme, gpu_models=[h100, a100],
                                            reference="registry.acme.example:5000/ml/train:1.0"),
    }
    images.retire_image(actor=ops, image=made["old-cuda"])
    return made


@pytest.fixture
def acme_instance(launch, bob, acme):
    instance = launch(bob, acme, name="acme-train", count=2)
    return instance_lifecycle.mark_running(instance=instance)


@pytest.fixture
def globex_instance(launch, charlie, globex):
    instance = launch(charlie, globex, name="globex-train", count=1)
    return instance_lifecycle.mark_running(instance=instance)


@pytest.fixture
def api():
    """An API client logged in as the given user (or anonymous)."""

    def _client(user=None):
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return _client


def pytest_collection_modifyitems(config, items):
    # Browser tests last: Playwright's sync API keeps an event loop running in the main
    # thread while the browser lives, which no async test may run beside. (So no
    # --dist loadfile or loadscope: they hand out whole files in an order of their own.)
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
