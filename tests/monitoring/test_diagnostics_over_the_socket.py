"""The agent's connection receives an operator's diagnostics request; the agent's answer
comes back over HTTP and is stored."""

import io

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from telemetry_wire import Agent

from agent import diagnostics as agent_diagnostics
from monitoring import diagnostics
from monitoring.models import DiagnosticsBundle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def bundle_storage(settings, tmp_path):
    settings.STORAGES = {**settings.STORAGES, "diagnostics": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path / "diag")}}}


def _bundle_bytes(tmp_path) -> bytes:
    path = tmp_path / "b.tar.gz"
    agent_diagnostics.collect(str(path), nv=None, log_tail=agent_diagnostics.LogTail(), max_bytes=1024 * 1024)
    return path.read_bytes()


async def test_the_request_reaches_the_hosts_agent_and_its_upload_is_stored(tokens, ops, fleet, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia tools here: each is recorded as missing
    host = fleet["hosts"]["h200-a"]
    async with Agent(tokens["h200-a"]) as a, Agent(tokens["h100-a"]) as other:
        assert (await a.hello(host="h200-a"))["type"] == "welcome"
        assert (await other.hello(host="h100-a"))["type"] == "welcome"
        bundle = await sync_to_async(diagnostics.request_bundle)(actor=ops, host=host)
        frame = await a.recv()
        assert frame["type"] == "diagnostics" and frame["id"] == bundle.pk
        assert await other.ws.receive_nothing(timeout=0.3)
    data = await sync_to_async(_bundle_bytes)(tmp_path)
    response = await sync_to_async(Client().post)(
        frame["upload"], data=data, content_type="application/gzip",
        HTTP_AUTHORIZATION=f"Bearer {tokens['h200-a']}", HTTP_X_DIAGNOSTICS_KEY=frame["key"])
    assert response.status_code == 201
    stored = await DiagnosticsBundle.objects.aget(pk=bundle.pk)
    items = {i["name"]: i["status"] for i in stored.manifest["items"]}
    assert items["nvidia-smi-q.xml"] == "missing" and stored.size == len(data)
    assert io.BytesIO(data).read(2) == b"\x1f\x8b"
