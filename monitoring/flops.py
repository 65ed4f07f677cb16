"""Achieved TFLOP/s, estimated from GPM tensor-core activity (``tflops_est``).

    estimate = tensor activity × dense peak of the instance's precision
               × SM clock / the model's top boost clock × the model's calibration factor

The datasheet peaks assume the top boost clock; a GPU at its power limit runs slower
(an H200 doing bf16 8192³ matrix products sat at 1,470-1,485 MHz of 1,980), and GPM's
activity counts cycles, so the clock ratio is what turns activity into work. GPM cannot
tell tf32 from bf16 (one tensor pipe serves both), so the precision is declared: by the
workload itself (GPUCONSOLE_PRECISION, docs/telemetry.md) or set by the team per instance
(default bf16). A wrong one is off by the ratio of the peaks: half or double (tf32 read
as bf16 doubles, fp8 read as bf16 halves). The precision in force is kept per interval
(instances.models.PrecisionPeriod), so each reading is estimated at the precision of its
time (``Timeline``) and a change today never rewrites the past. Measured
on one H200 (bench/tflops_calibration.py, docs/benchmarks.md): with factor 0.98 the
estimate was within ±5% for large bf16, fp16, tf32 and fp8 matrix products, and -7% to
0% for 1024³ ones. It is an estimate: every figure carries its ``basis``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

DEFAULT_PRECISION = "bf16"

# Dense (no sparsity) tensor-core peaks, TFLOP/s, of the SXM parts by the vendor's
# datasheets, and the boost clock those peaks assume.
PEAK_TFLOPS = {
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0},
    "H100": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp8": 1978.9},
    "H200": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp8": 1978.9},
}
MAX_SM_CLOCK_MHZ = {"A100": 1410, "H100": 1980, "H200": 1980}
# family -> (factor, where it comes from)
CALIBRATION = {
    "H200": (0.98, "measured on an H200, 2026-12-03 (docs/benchmarks.md)"),
    "H100": (0.98, "taken from the H200, which has the same Hopper tensor cores and peaks; not measured on an H100"),
    "A100": (1.0, "not calibrated: datasheet peak only"),
}
_FAMILY = re.compile(r"\b([AH]\d{3})")


def family(model_name: str) -> str | None:
    match = _FAMILY.search(model_name.upper())
    return match.group(1) if match and match.group(1) in PEAK_TFLOPS else None


def slice_share(profile_name: str | None, kind: str | None) -> float | None:
    """The share of the GPU's tensor cores a slice has: MIG "3g.40gb" has 3 of 7
    compute slices. A vGPU has no GPM activity of its own, so no estimate (None)."""
    if kind is None:
        return 1.0
    if kind != "mig":
        return None
    match = re.match(r"(\d)g\.", profile_name or "")
    return int(match.group(1)) / 7 if match else None


@dataclass(frozen=True)
class Basis:
    """What one device's estimate rests on, shown beside every figure."""

    family: str
    precision: str
    peak_tflops: float  # of the device (a MIG slice: its share)
    max_clock_mhz: int
    factor: float
    source: str
    declared: str = "default"  # who said the precision: "workload", "team", "default" (never set)

    @property
    def doubtful(self) -> bool:
        """Only the workload knows its precision; anything else is an assumption."""
        return self.declared != "workload"

    def precision_text(self) -> str:
        if not self.doubtful:
            return f"{self.precision}, declared by the workload"
        who = "set by the team" if self.declared == "team" else "assumed (never set)"
        return f"{self.precision}, {who}: not declared by the workload, so off by up to 2× if it runs another precision"

    def describe(self) -> str:
        return (
            f"Estimate: GPM tensor activity × {self.peak_tflops:.1f} TFLOP/s ({self.family} dense {self.precision} peak"
            f"{'' if self.peak_tflops == PEAK_TFLOPS[self.family][self.precision] else ', this slice’s share'})"
            f" × SM clock / {self.max_clock_mhz} MHz × {self.factor:g} ({self.source}). "
            f"Precision {self.precision_text()}."
        )

    def as_dict(self) -> dict:
        return {"family": self.family, "precision": self.precision, "peak_tflops": round(self.peak_tflops, 1),
                "max_clock_mhz": self.max_clock_mhz, "factor": self.factor, "source": self.source,
                "declared": self.declared, "doubtful": self.doubtful, "precision_text": self.precision_text(),
                "text": self.describe()}


class Timeline:
    """The basis in force over time: steps of (start in Unix seconds, basis), each in
    force until the next; the first also covers anything before it."""

    def __init__(self, steps: list[tuple[float, Basis | None]]):
        self.steps = sorted(steps, key=lambda step: step[0]) or [(float("-inf"), None)]
        self._starts = [start for start, _ in self.steps]

    @classmethod
    def constant(cls, b: Basis | None) -> Timeline:
        return cls([(float("-inf"), b)])

    def at(self, t: float) -> Basis | None:
        return self.steps[max(0, bisect_right(self._starts, t) - 1)][1]

    @property
    def current(self) -> Basis | None:
        return self.steps[-1][1]

    def within(self, start: float, end: float) -> list[tuple[float, Basis | None]]:
        """The steps in force during [start, end), the first clipped to ``start``."""
        first = max(0, bisect_right(self._starts, start) - 1)
        return [(start, self.steps[first][1])] + [(s, b) for s, b in self.steps[first + 1:] if s < end]


def basis(model_name: str, precision: str = DEFAULT_PRECISION, *, share: float | None = 1.0,
          declared: str = "default") -> Basis | None:
    """None when the model is not in the table, it has no such precision (fp8 on an
    A100), or the device is a vGPU."""
    fam = family(model_name)
    if fam is None or share is None or precision not in PEAK_TFLOPS[fam]:
        return None
    factor, source = CALIBRATION[fam]
    return Basis(fam, precision, PEAK_TFLOPS[fam][precision] * share, MAX_SM_CLOCK_MHZ[fam], factor, source, declared)


def estimate(tensor_active_pct: float | None, sm_clock_mhz: float | None, b: Basis | None) -> float | None:
    """Achieved TFLOP/s; None when activity is unknown. Without a clock reading the top
    boost clock is assumed (an upper bound)."""
    if b is None or tensor_active_pct is None:
        return None
    clock = 1.0 if sm_clock_mhz is None else min(1.0, max(0.0, sm_clock_mhz / b.max_clock_mhz))
    return round(tensor_active_pct / 100 * b.peak_tflops * clock * b.factor, 2)


def mfu_pct(tflops: float | None, b: Basis | None) -> float | None:
    """Model FLOPs utilization: achieved over the dense peak of the precision."""
    if tflops is None or b is None:
        return None
    return round(100 * tflops / b.peak_tflops, 1)
