"""GET /api/v1/agent/allocations/ tells a host's agent what each of its devices is held
for: only with a live host token, only that host's devices."""

import pytest
from django.test import Client

from monitoring import services

pytestmark = pytest.mark.django_db
URL = "/api/v1/agent/allocations/"


def get(token=None, method="get"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return getattr(Client(), method)(URL, **headers)


def test_it_lists_the_held_devices_of_the_tokens_host(tokens, acme_instance):
    body = get(tokens["h100-a"]).json()
    assert body == {"host": "h100-a", "devices": {
        "GPU-h100-a-0": {"state": "running", "instance": "acme-train"},
        "GPU-h100-a-1": {"state": "running", "instance": "acme-train"},
    }}


def test_a_pending_slice_says_pending(tokens, launch, charlie, globex, fleet):
    launch(charlie, globex, name="globex-nb", model="A100-80GB", slice_profile=fleet["mig"])
    devices = get(tokens["a100-mig"]).json()["devices"]
    assert devices == {"MIG-a100-mig-0-0": {"state": "pending", "instance": "globex-nb"}}
    assert get(tokens["h100-a"]).json()["devices"] == {}


def test_it_refuses_without_a_live_token(tokens, ops, fleet):
    assert get().status_code == 401
    assert get("gph_nope").status_code == 401
    token = services.authenticate_agent(tokens["h100-a"])
    services.revoke_host_token(actor=ops, token=token)
    assert get(tokens["h100-a"]).status_code == 401
    assert get(tokens["h100-b"], method="post").status_code == 405
