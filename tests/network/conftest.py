import pytest

from instances import services as instance_services
from network import services


@pytest.fixture
def acme_net(acme, bob):
    """Acme's default VPC, subnet and group."""
    vpc, subnet, group = services.ensure_defaults(actor=bob, team=acme)
    return {"vpc": vpc, "subnet": subnet, "group": group}


@pytest.fixture
def running(launch):
    """Launch, attach to the network (default subnet and group unless named) and run."""

    def _running(actor, team, name, *, host=None, subnet=None, groups=None):
        instance = launch(actor, team, name=name, host=host)
        services.attach_instance(actor=actor, instance=instance, subnet=subnet, groups=groups)
        return instance_services.mark_running(instance=instance)

    return _running
