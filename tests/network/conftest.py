import pytest
from django.db import transaction

from instances import lifecycle as instance_lifecycle
from network import interfaces, vpcs


@pytest.fixture(scope="session", autouse=True)
def _close_thread_connections(django_db_setup):
    """The agent consumer queries from worker threads whose connections outlive a test;
    close them before the test database is dropped."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    from monitoring.consumers import close_writer_connections

    close_writer_connections()
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture(autouse=True)
def _after_commit_at_once(monkeypatch):
    """Each test runs in one transaction that never commits: what waits for the commit
    (a host's new rules, sending them) runs at once instead."""
    monkeypatch.setattr(transaction, "on_commit", lambda func, using=None, robust=False: func())


@pytest.fixture
def acme_net(acme, bob):
    """Acme's default VPC, subnet and group."""
    vpc, subnet, group = vpcs.ensure_defaults(actor=bob, team=acme)
    return {"vpc": vpc, "subnet": subnet, "group": group}


@pytest.fixture
def running(launch):
    """Launch, attach to the network (default subnet and group unless named) and run."""

    def _running(actor, team, name, *, host=None, subnet=None, groups=None):
        instance = launch(actor, team, name=name, host=host)
        interfaces.attach_instance(actor=actor, instance=instance, subnet=subnet, groups=groups)
        return instance_lifecycle.mark_running(instance=instance)

    return _running
