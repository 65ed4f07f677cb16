"""Diagnostics bundles: asked of the agent, uploaded with the host token, stored,
listed, downloaded and expired; each step audited."""

import io
import json
import tarfile
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from audit.models import AuditEvent
from monitoring import diagnostics
from monitoring.models import DiagnosticsBundle


@pytest.fixture(autouse=True)
def bundle_storage(settings, tmp_path):
    settings.STORAGES = {**settings.STORAGES, "diagnostics": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path / "diag")}}}
    return tmp_path / "diag"


def _tar(manifest=None) -> bytes:
    manifest = manifest if manifest is not None else {"host": "h200-a", "items": [{"name": "nvml.json",
                                                                                  "status": "ok"}]}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in (("manifest.json", json.dumps(manifest).encode()), ("nvml.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def requested(api, ops, fleet, django_capture_on_commit_callbacks):
    """Collect on h200-a as ops; returns (response, the frame the agent received)."""
    host = fleet["hosts"]["h200-a"]
    layer = get_channel_layer()
    async_to_sync(layer.group_add)(diagnostics.agent_group(host.pk), "agent-test")
    with django_capture_on_commit_callbacks(execute=True):
        response = api(ops).post(f"/api/v1/hosts/{host.pk}/diagnostics/")
    message = async_to_sync(layer.receive)("agent-test")
    return response, json.loads(message["frame"])


def _upload(client, frame, token, data):
    return client.post(frame["upload"], data=data, content_type="application/gzip",
                       HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_X_DIAGNOSTICS_KEY=frame["key"])


def test_collect_asks_the_agent_over_its_socket_and_is_audited(requested):
    response, frame = requested
    assert response.status_code == 202
    assert frame["type"] == "diagnostics" and frame["id"] == response.json()["id"]
    assert AuditEvent.objects.filter(action="host.diagnostics.collect").count() == 1


def test_the_agent_uploads_and_the_operator_downloads_the_same_bytes(requested, client, tokens, api, ops, fleet):
    _, frame = requested
    data = _tar()
    assert _upload(client, frame, tokens["h200-a"], data).status_code == 201
    host = fleet["hosts"]["h200-a"]
    [listed] = api(ops).get(f"/api/v1/hosts/{host.pk}/diagnostics/").json()["results"]
    assert listed["state"] == "stored" and listed["size"] == len(data) and len(listed["sha256"]) == 64
    assert listed["items"][0]["name"] == "nvml.json"
    download = api(ops).get(f"/api/v1/hosts/{host.pk}/diagnostics/{listed['id']}/download/")
    assert b"".join(download.streaming_content) == data
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"host.diagnostics.stored", "host.diagnostics.download"} <= actions


def test_an_upload_with_another_hosts_token_or_a_wrong_key_is_refused(requested, client, tokens):
    _, frame = requested
    assert _upload(client, frame, tokens["h100-a"], _tar()).json()["code"] == "unknown_bundle"
    assert _upload(client, dict(frame, key="guess"), tokens["h200-a"], _tar()).json()["code"] == "unknown_bundle"
    assert _upload(client, frame, "gph_nope", _tar()).status_code == 401
    assert DiagnosticsBundle.objects.get().state == "requested"


def test_something_that_is_not_a_bundle_is_refused_with_its_name(requested, client, tokens, bundle_storage):
    _, frame = requested
    response = _upload(client, frame, tokens["h200-a"], b"not a tar")
    assert response.status_code == 400 and response.json()["code"] == "bad_bundle"
    assert not bundle_storage.exists() or not any(bundle_storage.rglob("*.tar.gz"))


def test_a_bundle_over_the_cap_is_refused(requested, client, tokens, settings):
    _, frame = requested
    settings.DIAGNOSTICS_MAX_BYTES = 100
    assert _upload(client, frame, tokens["h200-a"], _tar() + b"x" * 200).json()["code"] == "too_large"


def test_a_second_upload_of_one_request_is_refused(requested, client, tokens):
    _, frame = requested
    _upload(client, frame, tokens["h200-a"], _tar())
    assert _upload(client, frame, tokens["h200-a"], _tar()).json()["code"] == "already_uploaded"


def test_bundles_past_retention_are_deleted_with_their_files(requested, client, tokens, bundle_storage,
                                                            django_capture_on_commit_callbacks):
    _, frame = requested
    _upload(client, frame, tokens["h200-a"], _tar())
    assert any(bundle_storage.rglob("*.tar.gz"))
    with django_capture_on_commit_callbacks(execute=True):
        diagnostics.expire(now=timezone.now() + timedelta(days=31))
    assert not any(bundle_storage.rglob("*.tar.gz"))
    assert not DiagnosticsBundle.objects.exists()
    assert AuditEvent.objects.filter(action="host.diagnostics.expire").exists()


def test_a_request_never_uploaded_is_given_up_with_the_reason(requested):
    diagnostics.expire(now=timezone.now() + timedelta(minutes=20))
    bundle = DiagnosticsBundle.objects.get()
    assert bundle.state == "failed" and "did not upload it within 15 minutes" in bundle.error


def test_a_second_collect_while_one_is_on_its_way_is_a_conflict(requested, api, ops, fleet):
    response = api(ops).post(f"/api/v1/hosts/{fleet['hosts']['h200-a'].pk}/diagnostics/")
    assert response.status_code == 409 and response.json()["code"] == "already_requested"
