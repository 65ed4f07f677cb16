"""What the shared JSON size/depth check (console/jsonlimits.py) costs on the ingest path:
parsing real agent frames with ``jsonlimits.loads`` against plain ``json.loads``, same
frames, same run; and how fast a hostile 5,000-deep document is refused.

    python bench/json_limits.py
    python bench/json_limits.py --records 500 --rounds 200

Frames are built from the recorded H200 trace (agent/traces/h200_mixed.jsonl)
with the agent's own encoder: ``--records`` records per frame, each record one GPU reading
with its metrics and a process list, as a v1 samples frame.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent import protocol  # noqa: E402
from console import jsonlimits  # noqa: E402

TRACE = REPO / "agent" / "traces" / "h200_mixed.jsonl"
PROCS = [{"pid": 4000 + i, "used_memory": 2**30 * (i + 1), "name": "python3", "user": "train",
          "cmd": "python3 train.py --config big.yaml"} for i in range(4)]


def frames(records: int, count: int) -> list[str]:
    lines = [json.loads(line) for line in TRACE.read_text().splitlines()[1:] if line.strip()]
    out = []
    seq = 1
    for n in range(count):
        bodies = []
        for i in range(records):
            row = lines[(n * records + i) % len(lines)]
            m = {k: v for k, v in row.items() if isinstance(v, int | float) and k != "t"}
            bodies.append(protocol.dumps({"seq": seq, "t": row["t"], "gpu": f"GPU-bench-{i % 8}", "m": m,
                                          "procs": PROCS}))
            seq += 1
        out.append(protocol.samples_frame("0" * 32, bodies))
    return out


def best_of(func, items, rounds: int) -> float:
    return min(_once(func, items) for _ in range(rounds))


def _once(func, items) -> float:
    start = time.perf_counter()
    for item in items:
        func(item)
    return (time.perf_counter() - start) / len(items)


def paired(a, b, items, rounds: int) -> tuple[float, float]:
    """Best of ``rounds`` for each, the two taking turns so machine noise hits both alike."""
    best_a = best_b = float("inf")
    for _ in range(rounds):
        best_a = min(best_a, _once(a, items))
        best_b = min(best_b, _once(b, items))
    return best_a, best_b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=64, help="records per frame (default 64)")
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    batch = frames(args.records, args.frames)
    size = sum(map(len, batch)) / len(batch)
    plain, limited = paired(json.loads, lambda text: jsonlimits.loads(text, max_bytes=protocol.MAX_FRAME_BYTES),
                            batch, args.rounds)
    print(f"frame: {args.records} records, {size / 1024:.1f} KiB of JSON")
    print(f"json.loads            {plain * 1e6:9.1f} µs/frame")
    print(f"jsonlimits.loads      {limited * 1e6:9.1f} µs/frame  ({limited / plain:.2f}x json.loads, "
          f"+{(limited - plain) * 1e6:.1f} µs)")
    deep = "[" * 5000 + "]" * 5000

    def refuse(text):
        try:
            jsonlimits.loads(text, max_bytes=protocol.MAX_FRAME_BYTES)
        except jsonlimits.JsonRefused:
            return
        raise AssertionError("a 5,000-deep document was accepted")

    print(f"5,000-deep refused in {best_of(refuse, [deep], args.rounds) * 1e6:9.1f} µs")


if __name__ == "__main__":
    main()
