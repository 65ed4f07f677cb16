"""Diagnostics bundles of a host (operators only): asked of the host's agent over its
websocket, uploaded by the agent over HTTPS with its host token and a one-time key,
kept through Django's storage API (the "diagnostics" entry of STORAGES, else files
under var/diagnostics), listed with size and SHA-256, downloaded by operators, deleted
after DIAGNOSTICS_RETENTION_DAYS. Every request, upload, download and deletion is
audited. The bundle itself is made by agent/diagnostics.py."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import tarfile
from datetime import datetime, timedelta

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.db import transaction
from django.utils import timezone

from agent import protocol
from agent.diagnostics import MAX_BUNDLE_BYTES
from audit.models import Outcome
from audit.recording import record_event
from instances.models import Host

from .models import BundleState, DiagnosticsBundle

MAX_MANIFEST_BYTES = 1024 * 1024
UPLOAD_WAIT = timedelta(minutes=15)


class DiagnosticsError(ValueError):
    """A request or an upload that cannot be taken (answers 400 with ``code``)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def storage() -> Storage:
    if "diagnostics" in getattr(settings, "STORAGES", {}):
        return storages["diagnostics"]
    return FileSystemStorage(location=settings.VAR_DIR / "diagnostics")


def max_bytes() -> int:
    return int(getattr(settings, "DIAGNOSTICS_MAX_BYTES", MAX_BUNDLE_BYTES))


def retention() -> timedelta:
    return timedelta(days=float(getattr(settings, "DIAGNOSTICS_RETENTION_DAYS", 30)))


def agent_group(host_id: int) -> str:
    """The channel group of a host's agent connections (monitoring.consumers joins it)."""
    return f"agent-diagnostics-{host_id}"


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@transaction.atomic
def request_bundle(*, actor, host: Host) -> DiagnosticsBundle:
    """Ask the host's agent for a bundle; the agent answers by uploading it."""
    if DiagnosticsBundle.objects.filter(host=host, state=BundleState.REQUESTED,
                                        requested_at__gt=timezone.now() - UPLOAD_WAIT).exists():
        raise DiagnosticsError("already_requested", f"A bundle of {host.name} is already on its way.")
    key = secrets.token_urlsafe(32)
    bundle = DiagnosticsBundle.objects.create(host=host, requested_by=actor if getattr(actor, "pk", None) else None,
                                              upload_key_hash=_key_hash(key))
    record_event(actor=actor, action="host.diagnostics.collect", target=host, details={"bundle": bundle.pk})
    frame = protocol.encode(protocol.DiagnosticsRequest(id=bundle.pk, key=key, max_bytes=max_bytes(),
                                                        upload=f"/api/v1/agent/diagnostics/{bundle.pk}/"))
    transaction.on_commit(lambda: _send(host.pk, frame))
    return bundle


def _send(host_id: int, frame: str) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(agent_group(host_id), {"type": "diagnostics.request", "frame": frame})


def read_manifest(data: bytes) -> dict:
    """The bundle's manifest.json (its first member); DiagnosticsError when it is not a
    gzip tar that starts with one."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            first = tar.next()
            if first is None or first.name != "manifest.json" or not first.isfile():
                raise DiagnosticsError("bad_bundle", "The bundle must start with manifest.json.")
            if first.size > MAX_MANIFEST_BYTES:
                raise DiagnosticsError("bad_bundle", "The manifest is larger than 1 MiB.")
            manifest = json.loads(tar.extractfile(first).read())
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        if isinstance(exc, DiagnosticsError):
            raise
        raise DiagnosticsError("bad_bundle", f"The bundle is not a gzip tar with a JSON manifest ({exc}).") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("items"), list):
        raise DiagnosticsError("bad_bundle", "The manifest must be an object with a list of items.")
    return manifest


@transaction.atomic
def receive_upload(*, host: Host, bundle_id: int, key: str, data: bytes) -> DiagnosticsBundle:
    """Store the bundle the host's agent uploads for request ``bundle_id``."""
    bundle = DiagnosticsBundle.objects.select_for_update().filter(pk=bundle_id, host=host).first()
    if bundle is None or not secrets.compare_digest(bundle.upload_key_hash, _key_hash(key or "")):
        raise DiagnosticsError("unknown_bundle", "No bundle of this host was requested with this key.")
    if bundle.state != BundleState.REQUESTED:
        raise DiagnosticsError("already_uploaded", "This bundle was already uploaded or given up.")
    if len(data) > max_bytes():
        raise DiagnosticsError("too_large", f"A bundle is at most {max_bytes():,} bytes.")
    manifest = read_manifest(data)
    digest = hashlib.sha256(data).hexdigest()
    record_event(actor=host, action="host.diagnostics.stored", target=host,
                 details={"bundle": bundle.pk, "size": len(data), "sha256": digest})
    # The file is written last: whatever fails before it leaves nothing behind.
    name = storage().save(f"{host.name}/{bundle.pk}-{timezone.now():%Y%m%dT%H%M%SZ}.tar.gz", ContentFile(data))
    bundle.state, bundle.file, bundle.stored_at = BundleState.STORED, name, timezone.now()
    bundle.size, bundle.sha256, bundle.manifest = len(data), digest, manifest
    bundle.save()
    return bundle


def open_bundle(*, actor, bundle: DiagnosticsBundle):
    """The stored file, opened for reading; the download is audited."""
    if bundle.state != BundleState.STORED:
        raise DiagnosticsError("not_stored", "This bundle has not been uploaded.")
    record_event(actor=actor, action="host.diagnostics.download", target=bundle.host,
                 details={"bundle": bundle.pk, "sha256": bundle.sha256})
    return storage().open(bundle.file, "rb")


def expire(*, now: datetime | None = None) -> int:
    """Delete bundles older than the retention; give up requests never uploaded."""
    now = now or timezone.now()
    for bundle in DiagnosticsBundle.objects.filter(state=BundleState.REQUESTED, requested_at__lt=now - UPLOAD_WAIT):
        _give_up(bundle.pk, now)
    gone = 0
    for bundle in DiagnosticsBundle.objects.filter(requested_at__lt=now - retention()).select_related("host"):
        _delete(bundle)
        gone += 1
    return gone


@transaction.atomic
def _give_up(pk: int, now: datetime) -> None:
    bundle = DiagnosticsBundle.objects.select_for_update().select_related("host").get(pk=pk)
    if bundle.state != BundleState.REQUESTED:
        return
    waited = int(UPLOAD_WAIT.total_seconds() // 60)
    bundle.state, bundle.error = BundleState.FAILED, f"the agent did not upload it within {waited} minutes"
    bundle.save(update_fields=["state", "error"])
    record_event(actor="system", action="host.diagnostics.stored", target=bundle.host, outcome=Outcome.FAILURE,
                 details={"bundle": bundle.pk, "error": bundle.error})


@transaction.atomic
def _delete(bundle: DiagnosticsBundle) -> None:
    record_event(actor="system", action="host.diagnostics.expire", target=bundle.host,
                 details={"bundle": bundle.pk, "sha256": bundle.sha256})
    name = bundle.file
    bundle.delete()
    if name:
        transaction.on_commit(lambda: storage().delete(name))
