"""A token limited to some teams reads only those teams on every surface: every list
the API serves and /metrics, even when it is an operator's token (operators see every
team otherwise)."""

import pytest
from drf_spectacular.generators import SchemaGenerator

from console.services import create_api_token
from monitoring.models import GpuLatest

pytestmark = pytest.mark.django_db


def _lists():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(path for path, ops in schema["paths"].items() if "get" in ops and "{" not in path)


LISTS = _lists()


@pytest.fixture
def globex_rows(globex_instance, acme_instance):
    gpu = globex_instance.gpus.first()
    GpuLatest.objects.create(uuid=gpu.uuid, gpu=gpu, host=gpu.host, time=gpu.host.created_at,
                             last_seen=gpu.host.created_at, metrics={"gpu_util": 1}, team=globex_instance.team,
                             instance=globex_instance)
    return globex_instance


def _client(api, raw):
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


def test_an_unlimited_operator_token_sees_globex(api, ops, globex_rows):
    _, raw = create_api_token(actor=ops, user=ops, name="all")
    assert "globex-train" in _client(api, raw).get("/api/v1/instances/").content.decode()


@pytest.mark.parametrize("path", LISTS)
def test_an_operator_token_limited_to_acme_sees_nothing_of_globex(api, ops, acme, globex_rows, path):
    _, raw = create_api_token(actor=ops, user=ops, name="acme-only", teams=[acme])
    response = _client(api, raw).get(path)
    assert response.status_code < 500
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode(errors="replace")
    secrets = ["globex-train", '"globex"', *(gpu.uuid for gpu in globex_rows.gpus.all())]
    assert not [s for s in secrets if s in text], path

