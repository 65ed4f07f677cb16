"""A signed tree head for every sealed batch, published outside the database the moment
the batch commits (``AUDIT_HEADS_FILE``, an append-only file forced to disk), so that the
newest records are pinned by a signature that someone with database rights cannot reach
or rewrite; verification checks the log against every published head.

One head covers whatever committed since the last one: each commit wakes this process's
sealer thread, which seals what is pending and publishes (``AUDIT_PUBLISH_IN_THREAD``
off: the committing thread publishes before it goes on); requests that come while the
process is signing are answered together by the head it signs next. Each
process keeps the right edge of the tree it last signed (its compact range) and extends
it with the new leaves only; a fresh process starts from the newest signed checkpoint.
"""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings
from django.db import connection
from django.utils import timezone

from . import headlog, keys, merkle, signing
from .models import Checkpoint
from .treeheads import head_signed, leaf_hashes, sign_head

logger = logging.getLogger(__name__)

_state = threading.Lock()
_signing = threading.Lock()
_asked = 0
# (pid, size, frontier): the tree this process last signed a head for.
_edge: tuple[int, int, list[bytes]] | None = None


def heads_path() -> str:
    return getattr(settings, "AUDIT_HEADS_FILE", "")


def in_thread() -> bool:
    return bool(heads_path()) and getattr(settings, "AUDIT_PUBLISH_IN_THREAD", True)


def request() -> None:
    """Publish a head covering everything committed before this call (after a commit)."""
    global _asked
    if not heads_path():
        return
    with _state:
        _asked += 1
    while True:
        if not _signing.acquire(blocking=False):
            return  # the thread signing now looks again before it lets go
        try:
            with _state:
                seen = _asked
            try:
                publish_head()
            except Exception:  # the next commit tries again; verification shows the gap
                logger.exception("audit: publishing the tree head failed")
        finally:
            _signing.release()
        with _state:
            if _asked == seen:
                return


def publish_head() -> dict | None:
    """Sign the chain head as it is now and append it to the heads file; None when this
    process, or another since, has already published this head.

    The file stays locked from the look at the head to the append, so processes that
    commit together publish one head between them: the others find it the file's newest
    and sign nothing."""
    global _edge
    path = heads_path()
    if not path:
        return None
    with headlog.locked(path) as fd:
        with connection.cursor() as cursor:  # raw: this runs after every sealed batch
            cursor.execute("SELECT seq, hash FROM audit_chainhead WHERE id = 1")
            head = cursor.fetchone()
        if head is None or head[0] == 0:
            return None
        seq, head_hash = head
        edge = _edge
        if edge is not None and edge[0] == os.getpid() and edge[1] == seq:
            return None
        if _published(path, seq, head_hash):
            return None  # another process signed this very head
        size, frontier = _start(seq)
        frontier, size = merkle.extend(frontier, size, leaf_hashes(size + 1, seq))
        signed = sign_head(
            seq=seq, head_hash=head_hash, frontier=frontier, time=timezone.now(), recheck_key=False
        ).as_dict()
        headlog.write_locked(fd, signed)
    _edge = (os.getpid(), size, frontier)
    return signed


# The newest heads looked at before signing: a few lines (a head is ~330 bytes).
TAIL_BYTES = 2048


def _published(path: str, seq: int, head_hash: str) -> bool:
    """Whether the file's newest lines hold a head of exactly this size and chain hash
    whose signature holds (a line that merely claims it does not stop this head)."""
    same = [h for h in headlog.newest(path, TAIL_BYTES) if h["tree_size"] == seq and h["chain_hash"] == head_hash]
    if not same:
        return False
    trusted = keys.public_keys()
    return any(head_signed(h, trusted) for h in same)


def _start(seq: int) -> tuple[int, list[bytes]]:
    """The compact range to extend up to ``seq``: this process's own, or the newest
    checkpoint at or below it when that is further on (its signature and root checked),
    else the empty tree. A process that has not signed for a while (others published
    meanwhile) so reads at most a checkpoint's interval of leaves."""
    edge = _edge
    own = edge if edge is not None and edge[0] == os.getpid() and edge[1] <= seq else None
    if own is not None and seq - own[1] < getattr(settings, "AUDIT_CHECKPOINT_EVENTS", 1000):
        return own[1], own[2]  # no checkpoint can be much further on
    checkpoint = Checkpoint.objects.filter(seq__lte=seq).order_by("-seq").first()
    if checkpoint is None or (own is not None and own[1] >= checkpoint.seq):
        return (own[1], own[2]) if own is not None else (0, [])
    frontier = checkpoint.frontier_bytes()
    public = keys.public_keys().get(checkpoint.key_id)
    message = headlog.message(checkpoint.as_dict())
    if (
        public is None
        or merkle.frontier_root(frontier).hex() != checkpoint.root
        or not signing.verify(public.key, message, checkpoint.signature)
    ):
        if own is not None:  # this process's own edge still holds: sign on it, and say so
            logger.error("audit: checkpoint #%s does not verify; the head is signed on this process's own edge",
                         checkpoint.seq)
            return own[1], own[2]
        raise ValueError(f"checkpoint #{checkpoint.seq} does not verify; no head is signed on it")
    return checkpoint.seq, frontier


def forget() -> None:
    """Drop this process's remembered tree edge (tests that rebuild the log)."""
    global _edge
    _edge = None
