"""What an alert rule may watch, how each figure is read, and the rules every team
starts with.

Three ways a metric is evaluated:
- ``ingest``: on each stored reading, by the agent connection that stores it (the
  condition must hold on every reading for the rule's hold time);
- ``event``: on each agent event of that kind (XID errors);
- ``periodic``: by the periodic alert task, over a window (agent silence, idle GPUs);
  ``unrated_usage`` by billing after each metering run (billing.meter_runs.check_unrated).
``tflops_est`` is the achieved TFLOP/s estimate of monitoring/flops.py at the holder instance's
precision. ``spot_vs_max`` is the spot price in effect as a percentage of a running spot
instance's max price (instances.preemption.spot_against_max); above 100 the instance is
under preemption notice. Spend against a budget is watched by the budget's own
thresholds (billing), so it is not a rule metric here.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from monitoring.activity import real_activity
from monitoring.flops import estimate

from .models import AlertKind, Comparison, Severity

INGEST, EVENT, PERIODIC = "ingest", "event", "periodic"

# NVML clock-event (throttle) reason bits.
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
POWER_BITS = SW_POWER_CAP | HW_POWER_BRAKE
THERMAL_BITS = SW_THERMAL | HW_THERMAL | HW_SLOWDOWN


@dataclass(frozen=True)
class Metric:
    label: str
    unit: str
    how: str
    kind: str


METRICS: dict[str, Metric] = {
    "gpu_util": Metric("Utilization", "%", INGEST, AlertKind.UTILIZATION),
    "real_activity": Metric("Real activity (SM occupancy, tensor, DRAM; else utilization)", "%", INGEST,
                            AlertKind.ACTIVITY),
    "tensor_active": Metric("Tensor-core activity", "%", INGEST, AlertKind.TENSOR),
    "tflops_est": Metric("Achieved TFLOP/s (estimate, flops.py)", "TFLOP/s", INGEST, AlertKind.TENSOR),
    "mem_used_pct": Metric("Memory used", "% of total", INGEST, AlertKind.MEMORY),
    "power_pct": Metric("Power against its limit", "% of limit", INGEST, AlertKind.POWER),
    "temp_c": Metric("Temperature", "°C", INGEST, AlertKind.TEMPERATURE),
    "throttle_power": Metric("Power-cap throttling", "1 while throttled", INGEST, AlertKind.THROTTLE),
    "throttle_thermal": Metric("Thermal throttling", "1 while throttled", INGEST, AlertKind.THROTTLE),
    "ecc_uncorrected": Metric("Uncorrected ECC errors", "count since driver load", INGEST, AlertKind.ECC),
    "xid": Metric("XID error", "XID code", EVENT, AlertKind.XID),
    "agent_silent": Metric("Agent silence", "s since last word", PERIODIC, AlertKind.AGENT_SILENT),
    "idle_billed": Metric("GPU idle but billed (real activity over the hold)", "%", PERIODIC, AlertKind.IDLE),
    "unrated_usage": Metric("Usage held unrated (no price in effect), per SKU", "GPU-hours", PERIODIC,
                            AlertKind.UNRATED),
    "spot_vs_max": Metric("Spot price against the instance's max price", "% of max price", PERIODIC,
                          AlertKind.SPOT_MAX),
}
# Figures only operators see: a team's rule may not watch them.
OPERATOR_ONLY = frozenset({"unrated_usage"})

COMPARE = {
    Comparison.GE: operator.ge,
    Comparison.GT: operator.gt,
    Comparison.LE: operator.le,
    Comparison.LT: operator.lt,
}


def _pct(part, whole):
    return None if part is None or not whole else 100.0 * part / whole


def _bits(mask, bits):
    return None if mask is None else (1.0 if int(mask) & bits else 0.0)


READERS = {  # ``m``: a reading's metrics (``protocol.Metrics``: None when not read)
    "gpu_util": lambda m: m.gpu_util,
    "real_activity": lambda m: real_activity(m.gpu_util, m.sm_occupancy_pct, m.tensor_active_pct, m.dram_bw_util_pct),
    "tensor_active": lambda m: m.tensor_active_pct,
    "mem_used_pct": lambda m: _pct(m.mem_used, m.mem_total),
    "power_pct": lambda m: _pct(m.power_mw, m.power_limit_mw),
    "temp_c": lambda m: m.temp_c,
    "throttle_power": lambda m: _bits(m.clocks_event_reasons, POWER_BITS),
    "throttle_thermal": lambda m: _bits(m.clocks_event_reasons, THERMAL_BITS),
    "ecc_uncorrected": lambda m: m.ecc_uncorrected_volatile,
}


def read(metric: str, m, basis=None) -> float | None:
    """The figure ``metric`` of one reading's metrics ``m`` (``protocol.Metrics``); None
    when the GPU did not report it. ``tflops_est`` needs the device's estimate basis
    (flops.Basis) for its holder."""
    if metric == "tflops_est":
        return estimate(m.tensor_active_pct, m.sm_clock_mhz, basis)
    return READERS[metric](m)


def holds(comparison: str, value: float | None, threshold: float) -> bool:
    return value is not None and COMPARE[comparison](value, threshold)


@dataclass(frozen=True)
class Default:
    name: str
    metric: str
    comparison: str
    threshold: float
    hold_s: int
    severity: str


# The rules every team starts with (and operators, for the whole fleet).
TEAM_DEFAULTS = (
    Default("Power-cap throttling for 5 min", "throttle_power", Comparison.GE, 1, 300, Severity.WARNING),
    Default("GPU temperature ≥ 85 °C for 1 min", "temp_c", Comparison.GE, 85, 60, Severity.WARNING),
    Default("New XID error", "xid", Comparison.GE, 0, 0, Severity.CRITICAL),
    Default("Uncorrected ECC errors", "ecc_uncorrected", Comparison.GT, 0, 0, Severity.CRITICAL),
    Default("Agent silent for 2 min", "agent_silent", Comparison.GE, 120, 0, Severity.CRITICAL),
    Default("GPU idle but billed for 30 min", "idle_billed", Comparison.LT, 10, 1800, Severity.INFO),
    Default("Spot price above max price", "spot_vs_max", Comparison.GT, 100, 0, Severity.WARNING),
)
FLEET_DEFAULTS = (
    Default("Fleet: GPU temperature ≥ 85 °C for 1 min", "temp_c", Comparison.GE, 85, 60, Severity.WARNING),
    Default("Fleet: power ≥ 98% of the limit for 1 min", "power_pct", Comparison.GE, 98, 60, Severity.WARNING),
    Default("Fleet: XID error", "xid", Comparison.GE, 0, 0, Severity.CRITICAL),
    Default("Fleet: uncorrected ECC errors", "ecc_uncorrected", Comparison.GT, 0, 0, Severity.CRITICAL),
    Default("Fleet: agent silent for 1 min", "agent_silent", Comparison.GE, 60, 0, Severity.CRITICAL),
    Default("Fleet: usage held unrated", "unrated_usage", Comparison.GT, 0, 0, Severity.WARNING),
)


def describe(metric: str, comparison: str, threshold: float, hold_s: int) -> str:
    spec = METRICS[metric]
    if metric == "xid":
        return "an XID error" + ("" if threshold <= 0 and comparison in (">=", ">") else
                                 f" with code {comparison} {threshold:g}")
    held = f" for {hold_s} s" if hold_s else ""
    if metric.startswith("throttle_") and comparison in (">=", ">") and 0 < threshold <= 1:
        return f"{spec.label}{held}"
    return f"{spec.label} {comparison} {threshold:g} {spec.unit}{held}"
