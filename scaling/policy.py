"""The scaling rule as a pure function: what a group should have and what to do now.

desired = clamp(ceil(queue depth / target per instance), min, max). A scale-out waits
for the scale-out cooldown since the last scale-out; a scale-in waits for the scale-in
cooldown since the last change either way, so a group that just grew does not shrink
on the next dip. Without a fresh queue depth a group keeps what it has (within bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from .models import Action, Reason


@dataclass(frozen=True)
class Bounds:
    min_instances: int
    max_instances: int
    target_per_instance: int
    scale_out_cooldown_s: int
    scale_in_cooldown_s: int


@dataclass(frozen=True)
class Plan:
    desired: int
    action: str
    count: int  # instances to launch or stop
    reason: str
    message: str


def wanted(queue_depth: int, target: int) -> int:
    return math.ceil(queue_depth / target)


def clamp(value: int, bounds: Bounds) -> int:
    return max(bounds.min_instances, min(bounds.max_instances, value))


def _target(queue_depth: int | None, current: int, bounds: Bounds) -> tuple[int, str, str]:
    if queue_depth is None:
        desired = clamp(current, bounds)
        return desired, Reason.NO_METRIC, f"no fresh queue depth: keeping {desired}"
    want = wanted(queue_depth, bounds.target_per_instance)
    basis = f"{queue_depth} queued / {bounds.target_per_instance} per instance = {want}"
    if want > bounds.max_instances:
        return bounds.max_instances, Reason.AT_MAX, f"{basis}, held at the max of {bounds.max_instances}"
    if want < bounds.min_instances:
        return bounds.min_instances, Reason.AT_MIN, f"{basis}, held at the min of {bounds.min_instances}"
    return want, Reason.QUEUE, basis


def _left(since: datetime | None, cooldown_s: int, now: datetime) -> int:
    """Whole seconds of cooldown left (0: none)."""
    if since is None:
        return 0
    left = since + timedelta(seconds=cooldown_s) - now
    return max(0, math.ceil(left.total_seconds()))


def decide(
    *, queue_depth: int | None, current: int, bounds: Bounds, now: datetime,
    last_scale_out_at: datetime | None, last_scale_in_at: datetime | None,
) -> Plan:
    desired, reason, message = _target(queue_depth, current, bounds)
    if desired > current:
        left = _left(last_scale_out_at, bounds.scale_out_cooldown_s, now)
        if left:
            return Plan(desired, Action.NONE, 0, Reason.COOLDOWN, f"{message}; scale-out cooldown, {left} s left")
        return Plan(desired, Action.SCALE_OUT, desired - current, reason, message)
    if desired < current:
        last = max((t for t in (last_scale_out_at, last_scale_in_at) if t is not None), default=None)
        left = _left(last, bounds.scale_in_cooldown_s, now)
        if left:
            return Plan(desired, Action.NONE, 0, Reason.COOLDOWN, f"{message}; scale-in cooldown, {left} s left")
        return Plan(desired, Action.SCALE_IN, current - desired, reason, message)
    return Plan(desired, Action.NONE, 0, reason, message)
