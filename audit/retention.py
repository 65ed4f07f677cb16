"""Retention: the oldest events deleted, only up to a signed checkpoint older than the
cutoff (never younger than 180 days), and only once an archive bundle of them verifies
offline."""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from . import chain, keys
from . import export as bundle
from .models import (
    AuditEvent,
    Checkpoint,
)
from .offline_verify import verify_bundle
from .proofs import proof_material
from .recording import record_event

RETENTION_FLOOR_DAYS = 180


def retention_cutoff(now: datetime | None = None) -> datetime:
    days = max(RETENTION_FLOOR_DAYS, int(getattr(settings, "AUDIT_RETENTION_DAYS", 365)))
    return (now or timezone.now()) - timedelta(days=days)


class ArchiveError(Exception):
    pass


def write_archive(events, head: Checkpoint) -> Path:
    """Write ``events`` (up to ``head``) as a JSON Lines bundle into AUDIT_ARCHIVE_DIR and
    verify it as an auditor would, with the public keys alone, before anything is dropped."""
    records, nodes = proof_material(events, head)
    manifest = bundle.manifest(
        generated_at=chain.iso_time(timezone.now()), filters={"archive": True},
        head=head.as_dict(), keys=[k.as_dict() for k in keys.public_keys().values()],
        records=records, nodes=nodes,
    )  # fmt: skip
    archive = bundle.Export(
        fmt="jsonl",
        queryset=events,
        through_seq=head.seq,
        count=manifest["count"],
        manifest=manifest,
    )
    folder = Path(settings.AUDIT_ARCHIVE_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    first = records[0][0] if records else 1
    path = folder / f"audit-archive-{first}-{head.seq}.jsonl"
    partial = path.with_suffix(".jsonl.partial")
    with open(partial, "wb") as handle:
        for chunk in archive.chunks():
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    result = verify_bundle(str(partial), pin=head.key_id)
    if not result.ok or result.events != manifest["count"]:
        raise ArchiveError(f"archive {partial} does not verify: {'; '.join(result.problems[:3])}")
    os.replace(partial, path)
    return path


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@transaction.atomic
def apply_retention(*, actor="system", now: datetime | None = None, batch: int = 100_000) -> int:
    """Delete the oldest events, only up to a signed checkpoint older than the cutoff, so
    the first remaining event still chains to a signature, and only once they are in an
    archive bundle that verifies offline. Never touches anything younger than 180 days
    (PostgreSQL's trigger refuses it too). Returns how many were deleted."""
    cutoff = retention_cutoff(now)
    first = AuditEvent.objects.filter(seq__isnull=False).order_by("seq").values_list("seq", flat=True).first()
    if first is None:
        return 0
    young = (
        AuditEvent.objects.filter(time__gte=cutoff, seq__isnull=False)
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    limit = min(first + batch - 1, (young - 1) if young is not None else first + batch - 1)
    anchor = (
        Checkpoint.objects.filter(seq__gte=first, seq__lte=limit, time__lt=cutoff)
        .order_by("-seq")
        .first()
    )
    if anchor is None:
        return 0
    doomed = AuditEvent.objects.filter(seq__lte=anchor.seq)
    archive = write_archive(doomed, anchor)  # raises (and nothing is deleted) if it cannot
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL audit.allow_retention = 'on'")
    deleted, _ = doomed.delete()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL audit.allow_retention = 'off'")
    record_event(
        actor=actor,
        action="audit.retention",
        target=anchor,
        details={
            "deleted": deleted, "from_seq": first, "through_seq": anchor.seq,
            "cutoff": cutoff.isoformat(), "anchor_hash": anchor.hash,
            "archive": archive.name, "archive_sha256": _sha256_file(archive),
        },
    )  # fmt: skip
    return deleted
