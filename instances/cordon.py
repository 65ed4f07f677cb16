"""Cordon and drain (operators): a cordoned host or GPU takes no new placements (the one
free-GPU definition, ``models.gpu_free_q``, and the slice filters of placement leave it
out); what already runs there keeps running. Draining cordons the host, tells the teams
of its running instances, gives spot and low-priority ones the usual preemption notice
and lists the on-demand and reserved ones for the operator to move."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agent.protocol import LiveMaintenance
from audit.recording import record_event
from console.errors import Refused

from . import preemption
from .models import HOLDING_STATES, PREEMPTIBLE, Gpu, Host, Instance, NoticeStatus, PreemptionNotice

MAX_REASON = 300


class CordonError(Refused):
    """A cordon or drain request that cannot be done as asked (answers 400)."""

    code = "bad_cordon"


@dataclass
class Drain:
    host: Host
    preempted: list[Instance] = field(default_factory=list)  # given a preemption notice
    to_move: list[Instance] = field(default_factory=list)  # on-demand and reserved: the operator's to move
    already_noticed: list[Instance] = field(default_factory=list)


def _reason(reason: str) -> str:
    reason = (reason or "").strip()
    if len(reason) > MAX_REASON:
        raise CordonError(f"The reason is at most {MAX_REASON} characters.")
    return reason


@transaction.atomic
def cordon_host(*, actor, host: Host, reason: str = "") -> Host:
    host = Host.objects.select_for_update().get(pk=host.pk)
    reason = _reason(reason)
    if host.cordoned_at is None:
        host.cordoned_at, host.cordon_reason = timezone.now(), reason
        host.save(update_fields=["cordoned_at", "cordon_reason"])
        record_event(actor=actor, action="host.cordon", target=host, details={"reason": reason})
    return host


@transaction.atomic
def uncordon_host(*, actor, host: Host) -> Host:
    host = Host.objects.select_for_update().get(pk=host.pk)
    if host.cordoned_at is not None:
        host.cordoned_at, host.cordon_reason = None, ""
        host.save(update_fields=["cordoned_at", "cordon_reason"])
        record_event(actor=actor, action="host.uncordon", target=host)
    return host


@transaction.atomic
def cordon_gpu(*, actor, gpu: Gpu, reason: str = "") -> Gpu:
    gpu = Gpu.objects.select_for_update().select_related("host").get(pk=gpu.pk)
    reason = _reason(reason)
    if gpu.cordoned_at is None:
        gpu.cordoned_at, gpu.cordon_reason = timezone.now(), reason
        gpu.save(update_fields=["cordoned_at", "cordon_reason"])
        record_event(actor=actor, action="gpu.cordon", target=gpu, details={"reason": reason, "host": gpu.host.name})
    return gpu


@transaction.atomic
def uncordon_gpu(*, actor, gpu: Gpu) -> Gpu:
    gpu = Gpu.objects.select_for_update().select_related("host").get(pk=gpu.pk)
    if gpu.cordoned_at is not None:
        gpu.cordoned_at, gpu.cordon_reason = None, ""
        gpu.save(update_fields=["cordoned_at", "cordon_reason"])
        record_event(actor=actor, action="gpu.uncordon", target=gpu, details={"host": gpu.host.name})
    return gpu


def running_on(host: Host):
    """The instances holding a GPU or a slice of ``host`` now."""
    return (Instance.objects.filter(Q(gpus__host=host) | Q(slices__gpu__host=host), state__in=HOLDING_STATES)
            .distinct().order_by("pk"))


@transaction.atomic
def drain_host(*, actor, host: Host, reason: str = "", notice: timedelta = preemption.DEFAULT_NOTICE) -> Drain:
    """Cordon ``host``; give its running spot and low-priority instances the preemption
    notice; list its on-demand and reserved ones for the operator (they are never stopped
    by the platform). Every team with an instance there is told through the notice or,
    for the others, a maintenance message on its live channel."""
    from console.live import publish_on_commit, team_group

    reason = _reason(reason) or "host maintenance"
    host = cordon_host(actor=actor, host=host, reason=reason)
    out = Drain(host=host)
    for instance in running_on(host):
        if instance.pricing_model in PREEMPTIBLE and instance.state == "running":
            if PreemptionNotice.objects.filter(instance=instance, status=NoticeStatus.PENDING).exists():
                out.already_noticed.append(instance)
                continue
            preemption.issue_preemption_notice(actor=actor, instance=instance, notice=notice,
                                             reason=f"host drained: {reason}")
            out.preempted.append(instance)
        else:
            out.to_move.append(instance)
            publish_on_commit([team_group(instance.team_id)], "maintenance", LiveMaintenance(
                team=instance.team_id, instance=instance.pk, name=instance.name,
                message=f"The host of {instance.name} is being drained for maintenance ({reason}); "
                        "an operator will contact you before anything is moved.",
            ))
    record_event(actor=actor, action="host.drain", target=host, details={
        "reason": reason, "preempted": [i.pk for i in out.preempted], "to_move": [i.pk for i in out.to_move],
    })
    return out
