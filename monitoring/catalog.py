"""The metrics the server stores, and how each one is kept in each tier.

Names and value ranges come from the agent's protocol module, so the server
enforces exactly what docs/agent-protocol.md documents.
"""

from __future__ import annotations

from agent.protocol import METRICS as RANGES

# Gauges: raw column, and min/avg/max in the rollups.
GAUGES = (
    "gpu_util",
    "mem_util",
    "mem_used",
    "power_mw",
    "temp_c",
    "fan_pct",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_bw_util_pct",
)
# Monotonic counters: raw column; the rollups keep the increase over the bucket and
# the last value seen (the next bucket's increase starts from it).
COUNTERS = ("energy_mj", "pcie_tx_bytes", "pcie_rx_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes")
# Counters an alert reads as they are; the rollups keep their maximum.
STATES = ("ecc_corrected_volatile", "ecc_uncorrected_volatile")
# Raw only: static-ish facts and bitmasks.
RAW_ONLY = ("mem_total", "power_limit_mw", "clocks_event_reasons")

RAW_METRICS = GAUGES + COUNTERS + STATES + RAW_ONLY
# Values that may reach 2**64 - 1; stored in a signed 64-bit column by wrapping.
UNSIGNED_64 = tuple(name for name in RAW_METRICS if RANGES[name][1] > 2**63 - 1)
FLOAT_METRICS = tuple(name for name in RAW_METRICS if not RANGES[name][2])

# What a chart may ask for (the query API's ``metric`` parameter).
CHARTABLE = GAUGES + COUNTERS + STATES
# The GPM metrics that say how busy a GPU really is; see activity.py.
GPM = ("sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct")

UNITS = {
    "gpu_util": "%",
    "mem_util": "%",
    "mem_used": "bytes",
    "mem_total": "bytes",
    "power_mw": "mW",
    "power_limit_mw": "mW",
    "temp_c": "°C",
    "fan_pct": "%",
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "sm_occupancy_pct": "%",
    "tensor_active_pct": "%",
    "dram_bw_util_pct": "%",
    "energy_mj": "mJ",
    "pcie_tx_bytes": "bytes",
    "pcie_rx_bytes": "bytes",
    "nvlink_tx_bytes": "bytes",
    "nvlink_rx_bytes": "bytes",
    "ecc_corrected_volatile": "count",
    "ecc_uncorrected_volatile": "count",
    "clocks_event_reasons": "bitmask",
}


def to_signed(value: int) -> int:
    return value - 2**64 if value > 2**63 - 1 else value


def to_unsigned(value: int) -> int:
    return value + 2**64 if value < 0 else value
