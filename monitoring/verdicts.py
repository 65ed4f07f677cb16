"""GPU and host health verdicts, kept: the facts each agent sends, judged with the
latest readings and recent XID errors (``health.judge``) by a periodic evaluation that
records each change (audited), raises one alert per unhealthy GPU, and cordons a failed
GPU unless HEALTH_AUTO_CORDON is off. Operators only: nothing here has a team."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event
from instances import cordon
from instances.models import Gpu, Host

from . import alert_hooks, health
from .models import EventKind, GpuEvent, GpuHealth, GpuLatest

SEVERITY = {health.DEGRADED: "warning", health.FAILED: "critical"}


def xid_window() -> timedelta:
    return timedelta(seconds=getattr(settings, "HEALTH_XID_WINDOW_S", 86_400))


def throttle_limit_s() -> float:
    return float(getattr(settings, "HEALTH_THROTTLE_S", health.THROTTLE_DEGRADED_S))


def auto_cordon() -> bool:
    return bool(getattr(settings, "HEALTH_AUTO_CORDON", True))


def store_facts(gpu_id: int | None, facts: dict, when: datetime) -> None:
    """Keep a GPU's newest health facts (an older report never replaces a newer one)."""
    if gpu_id is None:
        return
    row, _ = GpuHealth.objects.get_or_create(gpu_id=gpu_id)
    if row.facts_at is None or when >= row.facts_at:
        row.facts, row.facts_at = facts, when
        row.save(update_fields=["facts", "facts_at"])


def evaluate(*, now: datetime | None = None) -> list[GpuHealth]:
    """Judge every GPU; returns the rows whose state changed."""
    now = now or timezone.now()
    gpus = list(Gpu.objects.select_related("host"))
    rows = {r.gpu_id: r for r in GpuHealth.objects.all()}
    latest = dict(GpuLatest.objects.filter(slice__isnull=True).values_list("gpu_id", "metrics"))
    xids: dict[int, list[int]] = {}
    for gpu_id, code in GpuEvent.objects.filter(kind=EventKind.XID, time__gte=now - xid_window(), gpu__isnull=False,
                                                code__isnull=False).values_list("gpu_id", "code"):
        xids.setdefault(gpu_id, []).append(code)
    active = alert_hooks.active()
    lost = set() if active is None else set(active.filter(kind="gpu_lost").values_list("gpu_id", flat=True))
    changed, conditions = [], []
    for gpu in gpus:
        row = rows.get(gpu.pk) or GpuHealth(gpu=gpu)
        metrics = latest.get(gpu.pk) or {}
        held_since = row.throttled_since
        verdict = _judge(row, metrics, xids.get(gpu.pk, ()), gpu.pk in lost, now)
        if _record(gpu, row, verdict, now, held_since):
            changed.append(row)
        if verdict.state != health.HEALTHY:
            conditions.append(_condition(gpu, verdict))
    alert_hooks.reconcile("gpu_health", conditions, now=now)
    return changed


def _judge(row: GpuHealth, metrics: dict, xids, lost: bool, now: datetime) -> health.Verdict:
    if health.throttle_reasons(metrics.get("clocks_event_reasons")):
        row.throttled_since = row.throttled_since or now
    else:
        row.throttled_since = None
    held = (now - row.throttled_since).total_seconds() if row.throttled_since else 0.0
    return health.judge(facts=row.facts, metrics=metrics, xids=list(xids), throttled_s=held, lost=lost,
                        throttle_limit_s=throttle_limit_s())


def _record(gpu: Gpu, row: GpuHealth, verdict: health.Verdict, now: datetime, held_since) -> bool:
    """Save the verdict (a row is written only when something changed); True when its
    state changed."""
    reasons = verdict.as_dict()["reasons"]
    if row.pk and row.state == verdict.state and row.reasons == reasons:
        if row.throttled_since != held_since:
            GpuHealth.objects.filter(pk=row.pk).update(throttled_since=row.throttled_since)
        return False
    return _save(gpu, row, verdict, reasons, now)


@transaction.atomic
def _save(gpu: Gpu, row: GpuHealth, verdict: health.Verdict, reasons: list, now: datetime) -> bool:
    """A change of state is audited, and a failed GPU cordoned. An operator may uncordon
    a failed GPU: it is cordoned again only on its next change of state."""
    before = row.state if row.pk else health.HEALTHY
    moved = before != verdict.state
    row.state, row.reasons, row.evaluated_at = verdict.state, reasons, now
    if moved:
        row.changed_at = now
        record_event(actor="system", action="gpu.health", target=gpu,
                     details={"from": before, "to": verdict.state, "why": verdict.summary[:500],
                              "host": gpu.host.name})
    row.save()
    if moved and verdict.state == health.FAILED and gpu.cordoned_at is None and auto_cordon():
        cordon.cordon_gpu(actor="system", gpu=gpu, reason=f"failed: {verdict.summary}"[: cordon.MAX_REASON])
    return moved


def _condition(gpu: Gpu, verdict: health.Verdict) -> dict:
    return dict(
        key=f"gpu_health:{gpu.uuid}", host_id=gpu.host_id, gpu_id=gpu.pk, uuid=gpu.uuid,
        severity=SEVERITY[verdict.state],
        message=f"GPU {gpu.index} of {gpu.host.name} is {verdict.state}: {verdict.summary}"[:300],
    )


# --- reading verdicts (pages, API, /metrics) -------------------------------------------


def gpu_verdicts(gpu_ids=None) -> dict[int, GpuHealth]:
    rows = GpuHealth.objects.all()
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=list(gpu_ids))
    return {r.gpu_id: r for r in rows}


def host_verdicts(hosts) -> dict[int, health.Verdict]:
    """{host id: verdict} of ``hosts`` from their GPUs' kept verdicts, in one query."""
    ids = [h.pk if isinstance(h, Host) else h for h in hosts]
    per_host: dict[int, dict[int, health.Verdict]] = {i: {} for i in ids}
    for host_id, index, state, reasons in GpuHealth.objects.filter(gpu__host_id__in=ids).values_list(
            "gpu__host_id", "gpu__index", "state", "reasons"):
        per_host[host_id][index] = verdict_of(state, reasons)
    return {host_id: health.host_verdict(gpus) for host_id, gpus in per_host.items()}


def verdict_of(state: str, reasons: list[dict]) -> health.Verdict:
    """A kept GPU verdict (its state and reasons as stored) as a Verdict."""
    return health.Verdict(state, tuple(health.Reason(r["state"], r["text"], r.get("action", "")) for r in reasons))


def host_verdict_of(gpus, rows: dict[int, GpuHealth]) -> health.Verdict:
    """The host verdict of all of a host's ``gpus`` from their rows already read
    (``gpu_verdicts``), without reading them again."""
    return health.host_verdict({g.index: verdict_of(rows[g.pk].state, rows[g.pk].reasons)
                                for g in gpus if g.pk in rows})
