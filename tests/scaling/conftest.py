import pytest

from console import services as console_services
from scaling import services


@pytest.fixture
def token(api):
    """An API client authenticated with a new token of ``user`` holding ``scopes``."""

    def _client(user, scopes=("read", "write")):
        _, raw = console_services.create_api_token(actor=user, user=user, name="queue-pusher", scopes=list(scopes))
        client = api()
        client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
        return client

    return _client


@pytest.fixture
def group(fleet, acme, bob):
    """Acme's group of 1-GPU H100 on-demand instances: 1 to 4, 10 queued items each."""
    return services.create_group(
        actor=bob, team=acme, name="workers", gpu_model=fleet["h100"], gpus_per_instance=1,
        pricing_model="on_demand", min_instances=1, max_instances=4, target_per_instance=10,
        scale_out_cooldown_s=60, scale_in_cooldown_s=120,
    )
