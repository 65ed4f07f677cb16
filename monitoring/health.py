"""Health verdicts of a GPU and of a host, in words an operator can act on.

Pure functions of what the agent reports (no Django), so the agent's own check on a
real host (``python -m agent.diagnostics --verdict``) and the console judge
alike. Inputs:
- ``facts``: the GPU's health facts, read by the agent on its counter cadence and sent
  when they change (``FACTS`` below: aggregate ECC, retired pages, row remapping,
  PCIe link, NVLink links);
- ``metrics``: its latest reading (volatile ECC counts, clock-event reasons);
- ``xids``: the XID codes it reported within the window (``HEALTH_XID_WINDOW_S``);
- ``throttled_s``: for how long a hardware clock-event reason has been held;
- ``lost``: the GPU no longer answers (fallen off the bus).
The table of XID codes follows NVIDIA's Xid catalog (docs/operations.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

HEALTHY, DEGRADED, FAILED = "healthy", "degraded", "failed"
STATES = (HEALTHY, DEGRADED, FAILED)
RANK = {HEALTHY: 0, DEGRADED: 1, FAILED: 2}

# The health facts on the wire (an event of kind "health"), each an integer.
FACTS = (
    "ecc_corrected_aggregate", "ecc_uncorrected_aggregate",
    "retired_sbe", "retired_dbe", "retired_pending",
    "remap_correctable", "remap_uncorrectable", "remap_pending", "remap_failed",
    "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max",
    "nvlink_links", "nvlink_down",
)  # fmt: skip

# Clock-event reasons that mean the hardware holds the clocks down (slowdown, thermal,
# power brake): idle, application clocks, sync boost and the software power cap are normal.
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
BAD_REASONS = {HW_SLOWDOWN: "hardware slowdown", SW_THERMAL: "software thermal slowdown",
               HW_THERMAL: "hardware thermal slowdown", HW_POWER_BRAKE: "hardware power brake"}
THROTTLE_DEGRADED_S = 300.0
# Below this utilization a PCIe link runs at a lower generation to save power.
PCIE_BUSY_UTIL = 10


@dataclass(frozen=True)
class Xid:
    state: str  # what one occurrence makes the GPU
    meaning: str
    action: str


XIDS: dict[int, Xid] = {
    13: Xid(HEALTHY, "graphics engine exception (usually the application's fault, e.g. an out-of-range access)",
            "restart the application; if it repeats across workloads, collect diagnostics"),
    31: Xid(HEALTHY, "GPU memory page fault (an application touched an invalid address)",
            "restart the application; if it repeats across workloads, collect diagnostics"),
    43: Xid(HEALTHY, "GPU stopped processing the application's work (an application fault)",
            "restart the application; the GPU itself needs nothing"),
    45: Xid(HEALTHY, "preemptive cleanup after an earlier error or a killed application",
            "nothing by itself; read the XID before it"),
    48: Xid(FAILED, "double-bit ECC error in GPU memory",
            "drain the GPU and reset it; if it repeats, contact support"),
    61: Xid(DEGRADED, "internal micro-controller breakpoint or warning",
            "reset the GPU when it is drained; if it repeats, contact support"),
    62: Xid(FAILED, "internal micro-controller halted",
            "drain the GPU and reset it; if it repeats, contact support"),
    63: Xid(DEGRADED, "ECC page retirement or row remapping recorded",
            "reset the GPU when it is drained, so the remapped row takes effect"),
    64: Xid(FAILED, "ECC page retirement or row remapping failed",
            "drain the GPU and contact support (the memory cannot be repaired in the field)"),
    74: Xid(FAILED, "NVLink error",
            "drain the GPU and reset it; if it repeats, check the NVLink bridges and contact support"),
    79: Xid(FAILED, "GPU has fallen off the bus",
            "drain the host and reboot it; if it repeats, check PCIe seating, power and cooling"),
    92: Xid(DEGRADED, "high single-bit ECC error rate",
            "watch it; if it persists, reset the GPU when drained and contact support"),
    94: Xid(DEGRADED, "contained ECC error (the affected application was stopped)",
            "reset the GPU when it is drained so the row is remapped"),
    95: Xid(FAILED, "uncontained ECC error (every application on the GPU is affected)",
            "drain the GPU and reset it"),
    119: Xid(FAILED, "GSP RPC timeout (the GPU's system processor stopped answering)",
             "drain the GPU and reset it or reboot the host; check the driver version"),
    120: Xid(FAILED, "GSP error", "drain the GPU and reset it or reboot the host; check the driver version"),
}
UNKNOWN_XID = Xid(DEGRADED, "an XID this console has no description of",
                  "look it up in NVIDIA's Xid catalog; collect diagnostics")


@dataclass(frozen=True)
class Reason:
    state: str
    text: str
    action: str = ""

    def words(self) -> str:
        return f"{self.text}: {self.action}" if self.action else self.text


@dataclass(frozen=True)
class Verdict:
    state: str = HEALTHY
    reasons: tuple[Reason, ...] = field(default_factory=tuple)

    @property
    def summary(self) -> str:
        """One line: the worst reasons first, or 'healthy'."""
        if not self.reasons:
            return "healthy"
        return "; ".join(r.text for r in self.reasons)

    def as_dict(self) -> dict:
        return {"state": self.state, "summary": self.summary,
                "reasons": [{"state": r.state, "text": r.text, "action": r.action} for r in self.reasons]}


def judge(*, facts: dict | None = None, metrics: dict | None = None, xids: list[int] | tuple = (),
          throttled_s: float = 0.0, lost: bool = False, throttle_limit_s: float = THROTTLE_DEGRADED_S) -> Verdict:
    """The verdict of one GPU (see the module doc)."""
    facts, metrics = facts or {}, metrics or {}
    reasons: list[Reason] = []
    if lost:
        reasons.append(Reason(FAILED, "the GPU does not answer (fallen off the bus or lost)",
                              "drain the host and reboot it; if it repeats, check PCIe seating, power and cooling"))
    reasons += _xid_reasons(xids)
    reasons += _memory_reasons(facts, metrics)
    reasons += _link_reasons(facts, metrics)
    reasons += _throttle_reasons(metrics, throttled_s, throttle_limit_s)
    return _verdict(reasons)


def host_verdict(gpus: dict[int, Verdict]) -> Verdict:
    """A host's verdict: its worst GPU's, each reason naming its GPU (``gpus``: index -> verdict)."""
    reasons = [Reason(r.state, f"GPU {index}: {r.text}", r.action)
               for index, v in sorted(gpus.items()) for r in v.reasons]
    return _verdict(reasons)


def throttle_reasons(mask: int | None) -> list[str]:
    """The hardware clock-event reasons set in ``mask``, in words."""
    if not mask:
        return []
    return [words for bit, words in BAD_REASONS.items() if mask & bit]


def _verdict(reasons: list[Reason]) -> Verdict:
    reasons.sort(key=lambda r: -RANK[r.state])
    worst = max((r.state for r in reasons), key=RANK.__getitem__, default=HEALTHY)
    return Verdict(worst, tuple(reasons))


def _xid_reasons(xids) -> list[Reason]:
    counts: dict[int, int] = {}
    for code in xids:
        counts[code] = counts.get(code, 0) + 1
    out = []
    for code, n in sorted(counts.items()):
        xid = XIDS.get(code, UNKNOWN_XID)
        times = f" ({n} times)" if n > 1 else ""
        out.append(Reason(xid.state, f"XID {code}{times}: {xid.meaning}", xid.action))
    return out


def _memory_reasons(facts: dict, metrics: dict) -> list[Reason]:
    out = []
    if facts.get("remap_failed"):
        out.append(Reason(FAILED, "row remapping failed (no spare rows left in a memory bank)",
                          "drain the GPU and contact support"))
    if facts.get("remap_pending"):
        out.append(Reason(DEGRADED, "a row remapping is pending", "reset the GPU when it is drained"))
    if facts.get("retired_pending"):
        out.append(Reason(DEGRADED, "a page retirement is pending", "reset the GPU when it is drained"))
    unc = metrics.get("ecc_uncorrected_volatile") or 0
    if unc:
        out.append(Reason(DEGRADED, f"{unc} uncorrected ECC error{'s' if unc != 1 else ''} since the last reset",
                          "reset the GPU when it is drained; if they come back, contact support"))
    elif facts.get("ecc_uncorrected_aggregate"):
        n = facts["ecc_uncorrected_aggregate"]
        out.append(Reason(HEALTHY, f"{n} uncorrected ECC error{'s' if n != 1 else ''} over the GPU's life"))
    remapped = facts.get("remap_uncorrectable") or 0
    if remapped and not facts.get("remap_failed"):
        out.append(Reason(HEALTHY, f"{remapped} row{'s' if remapped != 1 else ''} remapped for uncorrectable errors"))
    return out


def _link_reasons(facts: dict, metrics: dict) -> list[Reason]:
    out = []
    width, width_max = facts.get("pcie_width"), facts.get("pcie_width_max")
    if width and width_max and width < width_max:
        out.append(Reason(DEGRADED, f"PCIe link x{width} of x{width_max}",
                          "check the card's seating and riser; reboot the host when it is drained"))
    gen, gen_max = facts.get("pcie_gen"), facts.get("pcie_gen_max")
    busy = (metrics.get("gpu_util") or 0) >= PCIE_BUSY_UTIL
    if gen and gen_max and gen < gen_max and busy:
        out.append(Reason(DEGRADED, f"PCIe link at Gen{gen} of Gen{gen_max} while busy",
                          "check the slot and BIOS settings; reboot the host when it is drained"))
    links, down = facts.get("nvlink_links") or 0, facts.get("nvlink_down") or 0
    if links and down == links:
        # A card with no bridge fitted reports every link down; the host's NVLink group
        # (instances.Host.nvlink_group) says whether one was expected.
        out.append(Reason(HEALTHY, f"no NVLink link active (0 of {links})"))
    elif links and down:
        out.append(Reason(DEGRADED, f"{down} of {links} NVLink links inactive",
                          "reset the GPU when it is drained; if links stay down, check the NVLink bridges or baseboard"))
    return out


def _throttle_reasons(metrics: dict, throttled_s: float, limit_s: float) -> list[Reason]:
    words = throttle_reasons(metrics.get("clocks_event_reasons"))
    if not words or throttled_s < limit_s:
        return []
    return [Reason(DEGRADED, f"clocks held down by {' and '.join(words)} for {throttled_s / 60:.0f} min",
                   "check cooling and power delivery of the host")]
