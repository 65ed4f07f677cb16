"""Signed checkpoints: the tree head signed after the events since the last one verify
and agree with the heads published outside the database; a break is recorded
(``audit.tamper``) instead of signed."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from . import headlog, keys, merkle, publish
from .models import (
    AuditEvent,
    ChainHead,
    Checkpoint,
    Outcome,
)
from .recording import record_event
from .sealer import seal_pending
from .treeheads import head_signed, leaf_hashes, sign_head
from .verification import verify

logger = logging.getLogger(__name__)


def write_checkpoint(*, now: datetime | None = None) -> Checkpoint | None:
    """Sign the tree head, after checking the events since the last signed head, so a
    signature never blesses a log that was already broken. Returns None when the head
    has not moved or the unsigned tail does not verify (then ``audit.tamper`` is
    recorded, once per break, and logged)."""
    seal_pending()
    # No lock: every event up to a committed head is committed and never changes.
    head = ChainHead.objects.filter(id=1).first()
    last = Checkpoint.objects.order_by("-seq").first()
    if last is not None and (head is None or head.seq < last.seq):
        _tamper_found(
            (head.seq if head else 0) + 1,
            f"missing tail: tree head #{last.seq} was signed but the chain head is #{head.seq if head else 0}",
        )
        return None
    if head is None or head.seq == 0 or (last is not None and last.seq >= head.seq):
        return None
    report = verify(start=(last.seq + 1) if last else None, end=head.seq, tail_checks=False)
    if not report.valid or report.last_seq != head.seq or report.last_hash != head.hash:
        _tamper_found(
            report.first_broken_seq, report.reason or "the chain head does not match its event"
        )
        return None
    try:
        leaves = leaf_hashes((last.seq + 1) if last else 1, head.seq)
    except ValueError as exc:
        _tamper_found((last.seq + 1) if last else 1, f"gap: {exc}")
        return None
    base, base_frontier = (last.seq, last.frontier_bytes()) if last else (0, [])
    if not _matches_published(base, base_frontier, leaves, head.seq):
        return None
    frontier, size = merkle.extend(base_frontier, base, leaves)
    if size != head.seq:
        _tamper_found(
            size + 1, f"gap: the log holds {size} events up to the chain head #{head.seq}"
        )
        return None
    checkpoint = sign_head(
        seq=head.seq, head_hash=head.hash, frontier=frontier, time=now or timezone.now()
    )
    try:
        with transaction.atomic():
            checkpoint.save(force_insert=True)
            return checkpoint
    except IntegrityError:  # another worker signed the same head a moment ago
        return Checkpoint.objects.filter(seq=head.seq).first()


def _matches_published(base: int, frontier: list[bytes], leaves: list[bytes], head_seq: int) -> bool:
    """Before a checkpoint signs #base+1..#head_seq: the newest heads published outside the
    database must agree (none beyond the chain head; the newest one in that span has the
    root these leaves give at its size), so a rewritten or rolled back tail is reported
    (``audit.tamper``), not signed."""
    path = publish.heads_path()
    heads = headlog.newest(path) if path else []
    if not heads:
        return True
    trusted = keys.public_keys()

    def newest_signed(candidates: list[dict]) -> dict | None:
        # Only the heads the checks below use have their signatures checked (largest
        # first; a line that fails its signature is passed over), not the whole tail.
        return next((h for h in sorted(candidates, key=lambda h: -h["tree_size"]) if head_signed(h, trusted)), None)

    beyond = newest_signed([h for h in heads if h["tree_size"] > head_seq])
    if beyond is not None and ChainHead.objects.values_list("seq", flat=True).get(id=1) < beyond["tree_size"]:
        # (re-read: the head may have moved, and been published, since it was read)
        _tamper_found(head_seq + 1, f"rollback: tree head #{beyond['tree_size']} was published but the chain head is #{head_seq}")
        return False
    newest = newest_signed([h for h in heads if base < h["tree_size"] <= head_seq])
    if newest is None:
        return True
    size = newest["tree_size"]
    edge, _ = merkle.extend(frontier, base, leaves[: size - base])
    if merkle.frontier_root(edge).hex() != newest["root"]:
        _tamper_found(
            base + 1,
            f"rewritten: events #{base + 1}..#{size} do not match the tree head published at {newest['time']}",
        )
        return False
    return True


def _tamper_found(seq, reason: str) -> None:
    logger.error("audit log does not verify at #%s: %s", seq, reason)
    latest = AuditEvent.objects.filter(action="audit.tamper").order_by("-seq").first()
    if latest is not None and latest.details.get("first_broken_seq") == seq:
        return
    record_event(
        actor="system", action="audit.tamper", outcome=Outcome.FAILURE,
        details={"first_broken_seq": seq, "reason": str(reason)[:300]},
    )  # fmt: skip


def covering_checkpoint() -> Checkpoint | None:
    """A checkpoint at the head (written now if needed), or the newest one there is."""
    return write_checkpoint() or Checkpoint.objects.order_by("-seq").first()
