"""Proofs for exports and auditors: the Merkle tree kept in memory, inclusion proofs for
the events of an export, consistency between two signed heads, and the export itself
(frozen at a head signed now, audited before its first byte)."""

from __future__ import annotations

import threading

from django.db import connection
from django.utils import timezone

from . import chain, keys, merkle
from . import export as bundle
from .checkpoints import covering_checkpoint
from .models import (
    AuditEvent,
    Checkpoint,
)
from .recording import record_event
from .treeheads import leaf_blob

_tree_lock = threading.Lock()


_tree: merkle.Tree | None = None


def load_tree(size: int, root: str) -> merkle.Tree:
    """The Merkle tree of at least the first ``size`` events, in memory, for proofs (it
    answers for any smaller size too), checked against the signed ``root`` of that size.
    Events that retention retired are stood for by the compact range of the signed head
    at the edge. Kept between calls and extended with new leaves only (about 64 bytes a
    leaf); rebuilt when it no longer matches the signed root."""
    global _tree
    first = AuditEvent.objects.filter(seq__isnull=False).order_by("seq").values_list("seq", flat=True).first() or 1
    base = min(first - 1, size)
    with _tree_lock:
        for fresh in (False, True):
            tree = _tree
            if fresh or tree is None or tree.base != base or tree.size > size + 100_000:
                tree = merkle.Tree(base=base, frontier=_frontier_at(base, first))
            if tree.size < size:
                tree.extend(leaf_blob(tree.size + 1, size))
            _tree = tree
            if tree.root(size).hex() == root:
                return tree
        _tree = None
    raise ValueError(f"the events do not match the signed tree head #{size} (verify the log)")


def _frontier_at(base: int, first: int) -> list[bytes]:
    if not base:
        return []
    anchor = Checkpoint.objects.filter(seq=base).first()
    if anchor is None:
        raise ValueError(f"events before #{first} are gone and no signed head stands for them")
    return anchor.frontier_bytes()


def _rows(queryset) -> list[tuple]:
    """All rows of a values_list queryset, fetched without building one object per row."""
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def proof_material(queryset, checkpoint: Checkpoint | None) -> tuple[list | None, list]:
    """The (seq, chain hash) of every event of ``queryset`` under the signed head, and
    the tree nodes that, with those, rebuild each one's inclusion proof. (None, []) when
    the queryset is the whole log up to the head: its records are the tree."""
    if checkpoint is None:
        return [], []
    covered = queryset.filter(seq__lte=checkpoint.seq)
    if covered.count() == checkpoint.seq and covered.filter(seq=1).exists():
        return None, []
    records = _rows(covered.order_by("seq").values_list("seq", "hash"))
    if not records:
        return records, []
    tree = load_tree(checkpoint.seq, checkpoint.root)
    with _tree_lock:
        nodes = merkle.covering_nodes([seq - 1 for seq, _ in records], checkpoint.seq, tree.hash)
    return records, nodes


def consistency(*, first: int, second: int | None = None) -> dict:
    """Two signed tree heads and the proof that the later extends the earlier."""
    heads = Checkpoint.objects.order_by("-seq")
    later = heads.filter(seq=second).first() if second is not None else heads.first()
    earlier = heads.filter(seq=first).first()
    if earlier is None or later is None:
        missing = first if earlier is None else second
        raise ValueError(f"no signed tree head of size {missing}")
    if earlier.seq > later.seq:
        raise ValueError("'first' must not be larger than 'second'")
    tree = load_tree(later.seq, later.root)
    with _tree_lock:
        proof = tree.consistency(earlier.seq, later.seq)
    return {
        "first": earlier.as_dict(), "second": later.as_dict(), "proof": [p.hex() for p in proof],
        "public_keys": [k.as_dict() for k in keys.public_keys().values()],
    }  # fmt: skip


def prepare_export(*, actor, queryset, fmt: str, filters: dict, team=None):
    """Freeze what an export will contain (every matching event up to a tree head signed
    now), gather its proofs, audit it, and hand back the stream's description. The event
    is committed before the first byte is sent, so an export cut off midway is on record."""
    if fmt not in bundle.FORMATS:
        raise ValueError(f"format must be one of {', '.join(bundle.FORMATS)}, not {fmt!r}")
    checkpoint = covering_checkpoint()
    through = checkpoint.seq if checkpoint is not None else 0
    records, nodes = proof_material(queryset, checkpoint)
    manifest = bundle.manifest(
        generated_at=chain.iso_time(timezone.now()), filters=filters,
        head=checkpoint.as_dict() if checkpoint else None,
        keys=[k.as_dict() for k in keys.public_keys().values()], records=records, nodes=nodes,
    )  # fmt: skip
    export = bundle.Export(
        fmt=fmt, queryset=queryset, through_seq=through, count=manifest["count"], manifest=manifest
    )
    record_event(
        actor=actor,
        action="audit.export",
        team=team,
        details={
            "format": fmt, "filters": filters, "count": export.count, "through_seq": through,
            "checkpoint_seq": checkpoint.seq if checkpoint else None,
        },
    )  # fmt: skip
    return export
