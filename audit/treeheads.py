"""The log as a Merkle tree: its leaves (one per event, from its chain hash) and tree
heads signed with the current key."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.utils.dateparse import parse_datetime

from . import chain, headlog, keys, merkle, signing
from .models import (
    AuditEvent,
    Checkpoint,
)

_LEAVES_SQL = (
    "SELECT string_agg(sha256('\\x00'::bytea || decode(hash, 'hex')), ''::bytea ORDER BY seq) "
    "FROM audit_auditevent WHERE seq >= %s AND seq <= %s"
)


def leaf_blob(first: int, last: int) -> bytes:
    """The Merkle leaves of events #first..#last back to back (32 bytes each, the leaf
    hash of each chain hash); on PostgreSQL hashed by the server in one aggregate."""
    if last < first:
        return b""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_LEAVES_SQL, [first, last])
            blob = bytes(cursor.fetchone()[0] or b"")
    else:
        hashes = AuditEvent.objects.filter(seq__gte=first, seq__lte=last).order_by("seq")
        blob = b"".join(
            merkle.event_leaf(h) for h in hashes.values_list("hash", flat=True).iterator(10_000)
        )
    if len(blob) != 32 * (last - first + 1):
        raise ValueError(f"events #{first}..#{last}: {len(blob) // 32} found, the log has a gap")
    return blob


def leaf_hashes(first: int, last: int) -> list[bytes]:
    blob = leaf_blob(first, last)
    return [blob[i : i + 32] for i in range(0, len(blob), 32)]


def sign_head(
    *, seq: int, head_hash: str, frontier: list[bytes], time: datetime, recheck_key: bool = True
) -> Checkpoint:
    """A Checkpoint (unsaved) for the tree of ``seq`` leaves tiled by ``frontier``."""
    signer = keys.signer(recheck=recheck_key)
    root = merkle.frontier_root(frontier).hex()
    message = signing.head_message(seq, root, head_hash, chain.iso_time(time))
    return Checkpoint(
        seq=seq, hash=head_hash, root=root, frontier=[f.hex() for f in frontier], time=time,
        key_id=signer.fingerprint, signature=signing.sign(signer.private, message),
    )  # fmt: skip


def head_signed(head: dict, keys: dict) -> bool:
    public = keys.get(head["key_fingerprint"])
    if public is None:
        return False
    when = parse_datetime(head["time"])
    if when is None or (public.valid_until is not None and when > public.valid_until):
        return False
    return signing.verify(public.key, headlog.message(head), head["signature"])
