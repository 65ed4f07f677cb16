"""Walk the chain and the signed checkpoints; name the first broken record and why.

The log is cut into segments at each checkpoint: (previous checkpoint, this checkpoint],
then the unsigned tail. Each segment starts from its signed anchor, so one broken record
marks its own segment INVALID without hiding whether later segments are intact.
"""

from __future__ import annotations

import json
import time as clock
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from django.db import transaction
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.timezone import is_naive, make_aware

from console.validators import clamp_moment, whole_number

from . import chain, headlog, merkle, signing, stream
from .hashing import chain_hash
from .models import AuditEvent, ChainHead, Checkpoint, Outcome, Verification
from .recording import describe_actor, record_event
from .redaction import clean_text
from .treeheads import head_signed

BAD_SIGNATURE = (
    "bad signature: the tree head's signature does not match (forged, or a key not listed)"
)
ROOT_MISMATCH = "checkpoint mismatch: the Merkle root differs from the signed tree head's (the log was rewritten)"


@dataclass
class Segment:
    first: int
    last: int | None = None
    checkpoint_seq: int | None = None
    checkpoint_time: str | None = None
    count: int = 0
    broken_seq: int | None = None
    reason: str = ""
    published: bool = False  # the heads published outside the database, not a stretch of the walk

    @property
    def valid(self) -> bool:
        return self.broken_seq is None and not self.reason

    def fail(self, seq: int, reason) -> None:  # a str, or a callable giving it later
        if self.valid:
            self.broken_seq, self.reason = seq, reason

    def describe(self) -> str:
        span = (
            f"#{self.first}..#{self.last}"
            if self.last is not None and self.last >= self.first
            else f"#{self.first}.."
        )
        if self.published:
            where = f"heads published outside the database, newest #{self.checkpoint_seq} at {self.checkpoint_time}"
        elif self.checkpoint_seq is not None:
            where = f"checkpoint #{self.checkpoint_seq} signed {self.checkpoint_time}"
        else:
            where = "unsigned tail"
        verdict = "valid" if self.valid else f"INVALID at #{self.broken_seq}: {self.reason}"
        return f"segment {span} ({self.count} events, {where}): {verdict}"

    def as_dict(self) -> dict:
        return asdict(self) | {"valid": self.valid}


@dataclass
class Report:
    segments: list[Segment] = field(default_factory=list)
    checked: int = 0
    seconds: float = 0.0
    first_seq: int | None = None
    last_seq: int | None = None
    last_hash: str | None = None
    checkpoints: int = 0

    @property
    def broken(self) -> Segment | None:
        return next((s for s in self.segments if not s.valid), None)

    @property
    def valid(self) -> bool:
        return self.broken is None

    @property
    def first_broken_seq(self) -> int | None:
        return self.broken.broken_seq if self.broken else None

    @property
    def reason(self) -> str:
        return self.broken.reason if self.broken else ""

    @property
    def rate(self) -> float:
        return self.checked / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        invalid = sum(1 for s in self.segments if not s.valid)
        head = "valid" if self.valid else "INVALID"
        span = f"#{self.first_seq}..#{self.last_seq}" if self.checked else "no events"
        text = (
            f"summary: {head}: {self.checked} events ({span}), {len(self.segments)} segments, "
            f"{invalid} invalid, {self.checkpoints} checkpoints"
        )
        if not self.valid:
            text += f"; first broken #{self.first_broken_seq} ({self.reason})"
        return text + f"; {self.seconds:.2f} s, {self.rate:,.0f} events/s"

    def lines(self) -> list[str]:
        return [s.describe() for s in self.segments] + [self.summary()]

    def as_dict(self) -> dict:
        return {
            "valid": self.valid,
            "checked": self.checked,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "first_broken_seq": self.first_broken_seq,
            "reason": self.reason,
            "checkpoints": self.checkpoints,
            "seconds": round(self.seconds, 3),
            "segments": [s.as_dict() for s in self.segments],
            "summary": self.summary(),
        }


# --- range bounds ----------------------------------------------------------------


def parse_bound(value: str, name: str) -> int | datetime:
    """``--from``/``--to``: a sequence number, an ISO date or an ISO date-time (UTC)."""
    text = (value or "").strip()
    if (seq := whole_number(text)) is not None:
        return seq
    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text) if len(text) == 10 else None
        if day is not None:
            moment = datetime(day.year, day.month, day.day)
    if moment is None:
        raise ValueError(f"{name}: {value!r} is neither a sequence number nor an ISO date/time")
    return clamp_moment(make_aware(moment) if is_naive(moment) else moment)


def _seq_bounds(start, end) -> tuple[int | None, int | None]:
    seqs = AuditEvent.objects.filter(seq__isnull=False).order_by("seq").values_list("seq", flat=True)
    lo = seqs.first() if start is None else None
    hi = seqs.last() if end is None else None
    if isinstance(start, datetime):
        lo = seqs.filter(time__gte=start).first()
    elif start is not None:
        lo = seqs.filter(seq__gte=start).first()
    if isinstance(end, datetime):
        hi = seqs.filter(time__lte=end).last()
    elif end is not None:
        hi = seqs.filter(seq__lte=end).last()
    return lo, hi


# --- explaining a break ------------------------------------------------------------


def _origin(prev_hash: str) -> int | None:
    return AuditEvent.objects.filter(hash=prev_hash).values_list("seq", flat=True).first()


def _hash_ok(row: list) -> bool:
    """Does the record hash to its stored hash? Details written before they were stored
    as canonical text (an older database) are re-encoded before giving up."""
    _id, seq, *fields, prev_hash, stored = row
    if chain.link(chain.canonical_text(seq, *fields), prev_hash) == stored:
        return True
    recoded = chain.canonical_details(json.loads(fields[-1]))
    return (
        recoded != fields[-1]
        and chain.link(chain.canonical_text(seq, *fields[:-1], recoded), prev_hash) == stored
    )


def _explain_edit(row: list) -> str:
    """A record whose content no longer matches its hash: moved or edited?"""
    _id, seq, *fields, prev_hash, stored = row
    fields[-1] = chain.canonical_details(json.loads(fields[-1]))
    origin = _origin(prev_hash)
    candidates = [origin + 1] if origin is not None else []
    candidates += [seq + d for d in range(-16, 17) if d and seq + d > 0]
    for written_as in dict.fromkeys(candidates):
        if chain.link(chain.canonical_text(written_as, *fields), prev_hash) == stored:
            return f"reorder: the record stored as #{seq} was written as #{written_as}"
    return "hash mismatch: the record's content does not match its hash (edited)"


def _explain_link(seq: int, prev_hash: str) -> str:
    origin = _origin(prev_hash)
    if origin is not None:
        return f"reorder: #{seq} follows #{origin}, not #{seq - 1}"
    return (
        "broken link: its previous hash is the hash of no record (a record before it was replaced)"
    )


# --- the walk ----------------------------------------------------------------------


def verify(start=None, end=None, *, tail_checks: bool = True, key: dict | None = None) -> Report:
    """Verify events between ``start`` and ``end`` (sequence numbers or datetimes,
    inclusive; None for the first and last). ``tail_checks`` also compares the end of
    the log with the chain head and with checkpoints signed beyond it. ``key``: the
    public keys to trust, by fingerprint (default: every key listed)."""
    from .keys import public_keys

    began = clock.perf_counter()
    key = public_keys() if key is None else key
    head = ChainHead.objects.filter(id=1).values_list("seq", "hash").first() or (
        0,
        chain.GENESIS_HASH,
    )
    lo, hi = _seq_bounds(start, end)
    report = Report()
    cps = list(
        Checkpoint.objects.order_by("seq").values_list(
            "seq", "hash", "time", "key_id", "signature", "root", "frontier"
        )
    )
    report.checkpoints = len(cps)
    published = _published_heads() if tail_checks and end is None else None
    if lo is None or hi is None or lo > hi:
        if published is not None:
            _check_tail(report, cps, key, head, last_seq=None)
            _check_published(report, published, {}, key, last_seq=0)
        report.seconds = clock.perf_counter() - began
        return report
    report.first_seq = lo
    roots: dict[int, bytes] = {}
    _walk(report, lo, hi, cps, key, head, wanted=published[0] if published else {}, roots=roots)
    if published is not None:
        _check_tail(report, cps, key, head, last_seq=report.last_seq)
        _check_published(report, published, roots, key, last_seq=report.last_seq)
    report.seconds = clock.perf_counter() - began
    return report


def _signed(cp: tuple, keys: dict) -> bool:
    """Is the tree head signed by a listed key, while that key was in service?"""
    seq, hash_, time, key_id, signature, root, _frontier = cp
    public = keys.get(key_id)
    if public is None or (public.valid_until is not None and time > public.valid_until):
        return False
    return signing.verify(
        public.key, signing.head_message(seq, root, hash_, chain.iso_time(time)), signature
    )


def _frontier_at(lo: int, cps: list[tuple]) -> merkle.CompactRange | None:
    """The tree's right edge just before event #lo, when a signed head there says it."""
    if lo == 1:
        return merkle.CompactRange()
    for cp in cps:
        if cp[0] == lo - 1:
            return merkle.CompactRange([bytes.fromhex(h) for h in cp[6]], cp[0])
    return None


def _anchor(lo: int, cps: list[tuple], key: str) -> tuple[str | None, str]:
    """The hash that event #lo must follow, and what vouches for it."""
    if lo == 1:
        return chain.GENESIS_HASH, "genesis"
    for cp in cps:
        if cp[0] == lo - 1:
            return (cp[1], "checkpoint") if _signed(cp, key) else (None, "bad signature")
    before = AuditEvent.objects.filter(seq=lo - 1).values_list("hash", flat=True).first()
    if before is not None:
        return before, "record"
    return None, "missing"


def _walk(
    report: Report, lo: int, hi: int, cps: list[tuple], key: str, head: tuple, *, wanted=(), roots=None
) -> None:
    """The chain from #lo to #hi; ``roots`` gets the Merkle root of the log at each size
    in ``wanted`` (published heads), where the walk can build the tree."""
    canonical_text, link, iso_time = chain.canonical_text, chain.link, chain.iso_time
    boundaries = [cp for cp in cps if lo <= cp[0] <= hi]
    ci = 0
    cp = boundaries[0] if boundaries else None

    def new_segment(first: int) -> Segment:
        seg = Segment(first=first)
        if cp is not None:
            seg.checkpoint_seq, seg.checkpoint_time = cp[0], iso_time(cp[2])
        report.segments.append(seg)
        return seg

    seg = new_segment(lo)
    expected_prev, vouched = _anchor(lo, cps, key)
    if expected_prev is None:
        why = (
            "its signature is bad"
            if vouched == "bad signature"
            else "no signed checkpoint anchors it"
        )
        seg.fail(lo, f"missing head: events before #{lo} are gone and {why}")
    expected_seq, last_hash, count = lo, None, 0
    head_seq, head_hash = head
    tree = _frontier_at(lo, cps)
    push, leaf_of = (tree.push, merkle.event_leaf) if tree is not None else (None, None)
    # The hot loop: a million rows a few seconds; keep it flat.
    for row in stream.rows(AuditEvent.objects.filter(seq__gte=lo, seq__lte=hi)):
        (
            rid,
            seq,
            t,
            at,
            aid,
            an,
            team,
            action,
            tt,
            tid,
            outcome,
            ip,
            ua,
            req,
            role,
            tname,
            details,
            prev,
            stored,
        ) = row
        count += 1
        if seg.broken_seq is None:
            if seq != expected_seq:
                seg.fail(expected_seq, f"gap: events #{expected_seq}..#{seq - 1} are missing")
            elif link(canonical_text(seq, t, at, aid, an, team, action, tt, tid, outcome, ip, ua, req, role, tname, details), prev) != stored and not _hash_ok(row):  # fmt: skip
                seg.fail(seq, partial(_explain_edit, row))  # explained after the stream
            elif expected_prev is not None and prev != expected_prev:
                seg.fail(seq, partial(_explain_link, seq, prev))
            elif seq == head_seq and stored != head_hash:
                seg.fail(seq, "head mismatch: the chain head's hash differs from this record's")
        seg.count += 1
        seg.last = seq
        if push is not None:
            push(leaf_of(stored))
            if seq in wanted:
                roots[seq] = tree.root()
        expected_prev, expected_seq, last_hash = stored, seq + 1, stored
        while cp is not None and cp[0] <= seq:
            if cp[0] < seq:
                seg.fail(cp[0], f"gap: checkpointed event #{cp[0]} is missing")
            elif stored != cp[1]:
                seg.fail(
                    seq,
                    "checkpoint mismatch: the chain was rewritten (hash differs from the signed checkpoint)",
                )
            elif tree is not None and (tree.size != seq or tree.root().hex() != cp[5]):
                seg.fail(seq, ROOT_MISMATCH)
            if _signed(cp, key):
                expected_prev = cp[1]
            else:
                seg.fail(cp[0], BAD_SIGNATURE)
            ci += 1
            cp = boundaries[ci] if ci < len(boundaries) else None
            if seq < hi:
                seg = new_segment(seq + 1)
    if seg.count == 0 and len(report.segments) > 1:
        report.segments.pop()
    report.checked, report.last_seq, report.last_hash = count, expected_seq - 1, last_hash
    # Explaining a break needs queries, which must wait until the COPY stream is done.
    for segment in report.segments:
        if callable(segment.reason):
            segment.reason = segment.reason()


def _check_tail(report: Report, cps: list[tuple], key: str, head: tuple, *, last_seq) -> None:
    """The log must reach every signed checkpoint and the chain head."""
    end = last_seq or 0
    beyond = [cp for cp in cps if cp[0] > end]
    head_seq = head[0]
    if not beyond and head_seq <= end:
        return
    seg = Segment(first=end + 1, last=max([head_seq] + [cp[0] for cp in beyond]))
    if beyond:
        cp = beyond[-1]
        seg.checkpoint_seq, seg.checkpoint_time = cp[0], chain.iso_time(cp[2])
        if not _signed(cp, key):
            seg.fail(cp[0], BAD_SIGNATURE)
        seg.fail(
            end + 1, f"missing tail: checkpoint #{cp[0]} was signed but the log ends at #{end}"
        )
    if head_seq > end:
        seg.fail(end + 1, f"missing tail: the chain head is #{head_seq} but the log ends at #{end}")
    report.segments.append(seg)


def chain_status(event: AuditEvent) -> dict:
    """What the event page shows: does this record hash right, does it follow its
    predecessor, and which signed tree head covers it."""
    from .keys import public_keys

    recomputed = chain_hash(event, event.prev_hash)
    if event.seq == 1:
        link_ok = event.prev_hash == chain.GENESIS_HASH
    else:
        before = AuditEvent.objects.filter(seq=event.seq - 1).values_list("hash", flat=True).first()
        if before is None:
            before = (
                Checkpoint.objects.filter(seq=event.seq - 1).values_list("hash", flat=True).first()
            )
        link_ok = None if before is None else before == event.prev_hash
    cp = Checkpoint.objects.filter(seq__gte=event.seq).order_by("seq").first()
    signed = cp is not None and _signed(
        (cp.seq, cp.hash, cp.time, cp.key_id, cp.signature, cp.root, cp.frontier), public_keys()
    )
    return {
        "recomputed": recomputed,
        "hash_ok": recomputed == event.hash,
        "link_ok": link_ok,
        "checkpoint": cp,
        "checkpoint_signed": signed,
    }


# --- heads published outside the database -------------------------------------------


def _published_heads() -> tuple[dict[int, list[dict]], list[str]] | None:
    """The heads in ``AUDIT_HEADS_FILE`` and in a witness's copy (``AUDIT_WITNESS_FILE``)
    by tree size, and the files' unreadable lines; None where neither is configured."""
    from django.conf import settings

    files = [(getattr(settings, "AUDIT_HEADS_FILE", ""), False), (getattr(settings, "AUDIT_WITNESS_FILE", ""), True)]
    if not any(path for path, _ in files):
        return None
    by_size: dict[int, list[dict]] = {}
    bad: list[str] = []
    for path, witnessed in files:
        for _number, head in headlog.read(path, extra=witnessed) if path else ():
            if isinstance(head, headlog.BadLine):
                bad.append(f"{Path(path).name}: {head}")
            else:
                by_size.setdefault(head["tree_size"], []).append(head)
    return by_size, bad


def _check_published(report: Report, published, roots: dict, key: dict, *, last_seq) -> None:
    """Every head published outside the database must be signed, and the database's log
    must reach it and have the very root it signed (the log extends each head unchanged:
    a rewrite, removal or rollback of any record up to it shows here)."""
    by_size, bad = published
    if not by_size and not bad:
        return
    end = last_seq or 0
    first = report.first_seq or 1
    newest = max(by_size, default=0)
    seg = Segment(first=first, last=max(end, newest), published=True)
    seg.checkpoint_seq = newest or None
    if newest:
        seg.checkpoint_time = by_size[newest][-1]["time"]
    report.segments.append(seg)
    if bad:
        seg.fail(end + 1, f"published heads: {bad[0]} ({len(bad)} unreadable lines)")
    matched = 0
    for size in sorted(by_size):
        for head in by_size[size]:
            if not head_signed(head, key):
                seg.fail(size, f"published head #{size} of {head['time']}: {BAD_SIGNATURE}")
            elif size > end:
                seg.fail(
                    end + 1,
                    f"rollback: tree head #{size} was published at {head['time']} but the log ends at #{end}",
                )
            elif size not in roots:
                continue  # retired by retention: its events are pinned by the checkpoints
            elif roots[size].hex() != head["root"]:
                seg.fail(
                    matched + 1,
                    f"rewritten: the log's first {size} events do not match the tree head published at "
                    f"{head['time']} outside the database (a record in #{matched + 1}..#{size} was changed, "
                    "added or removed)",
                )
            else:
                matched = max(matched, size)
        if not seg.valid:
            return
    seg.count = matched


def run_verification(*, actor, start=None, end=None) -> Verification:
    """Walk the chain (or part of it), keep the result for the audit page, audit it.
    The walk reads outside any transaction, so writers are never held up by it."""
    report = verify(start=start, end=end)
    _, _, actor_name = describe_actor(actor)
    with transaction.atomic():
        run = Verification.objects.create(
            actor_name=clean_text(actor_name, 150),
            valid=report.valid,
            checked=report.checked,
            first_seq=report.first_seq,
            last_seq=report.last_seq,
            first_broken_seq=report.first_broken_seq,
            reason=report.reason[:300],
            seconds=report.seconds,
            segments=[s.as_dict() for s in report.segments],
        )
        record_event(
            actor=actor,
            action="audit.verify",
            target=run,
            target_name="valid" if report.valid else "INVALID",  # not the run's name, which counts the whole log
            outcome=Outcome.SUCCESS if report.valid else Outcome.FAILURE,
            details=_verify_details(actor, report, start, end),
        )
    run.report = report
    return run


def _verify_details(actor, report: Report, start, end) -> dict:
    """What the ``audit.verify`` event keeps. Its actor reads it in their own log, so one
    who may not read the whole log (a team's admin or auditor) gets what the verdict page
    tells them: no count of the whole log's records, and the broken record's number and
    reason only when that record is one they may see."""
    # (here, not above: the policy access asks reads every app's models)
    from .access import broken_is_theirs, reads_whole_log

    details = {"valid": report.valid, "from": _bound_text(start), "to": _bound_text(end)}
    if reads_whole_log(actor):
        return details | {"checked": report.checked, "first_broken_seq": report.first_broken_seq,
                          "reason": report.reason}
    if broken_is_theirs(actor, report):
        return details | {"first_broken_seq": report.first_broken_seq, "reason": report.reason}
    if report.first_broken_seq is not None:
        return details | {"broken": "a record of another team"}
    return details


def _bound_text(value) -> str | int | None:
    return value.isoformat() if isinstance(value, datetime) else value
