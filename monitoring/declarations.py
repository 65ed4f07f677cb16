"""Precisions declared by workloads: a process that runs with GPUCONSOLE_PRECISION in
its environment says what its tensor work runs in; the agent reads it from /proc and
sends it with the process list. When the declaration of a holder's processes changes,
the holder instance's precision follows (``instances.lifecycle.set_precision`` with the
source "workload"), so its TFLOP/s estimate rests on the workload's word, not a guess.

Ingest notes the newest reading of each device per flush (no queries) and applies the
changes in the flush's transaction; an unchanged declaration costs a dict lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from msgspec import UNSET

log = logging.getLogger(__name__)


class Declared:
    """What one agent connection's workloads declared, per holder instance."""

    def __init__(self, host_id: int):
        self.host_id = host_id
        self.seen: dict[int, str] = {}  # instance id -> the precision last applied
        self.pending: dict[int, str] = {}

    def note(self, readings: Iterable[tuple]) -> None:
        """(record, held) pairs, the newest of each device: a holder whose processes all
        declare one precision, other than the one last applied, is due."""
        for record, held in readings:
            procs = record.procs
            if not procs or procs is UNSET or held.instance_id is None:
                continue
            said = {p.precision for p in procs if p.precision is not UNSET}
            if len(said) == 1:
                precision = said.pop()
                if self.seen.get(held.instance_id) != precision:
                    self.pending[held.instance_id] = precision

    def apply(self) -> None:
        """Set each due holder's precision (inside the caller's transaction)."""
        if not self.pending:
            return
        from instances import lifecycle, transitions
        from instances.models import Host, Instance, PrecisionSource

        host = Host.objects.get(pk=self.host_id)
        for instance in Instance.objects.filter(pk__in=list(self.pending)):
            precision = self.pending[instance.pk]
            try:
                lifecycle.set_precision(actor=host, instance=instance, precision=precision,
                                       source=PrecisionSource.WORKLOAD)
            except transitions.LifecycleError as exc:
                log.warning("precision %s declared on %s not applied: %s", precision, instance.name, exc)
            self.seen[instance.pk] = precision
        self.pending.clear()
