"""Drive one GPU through the phases of the recorded trace and print when each ran.

Phases: idle, bf16 matmul (compute-bound), device-to-device copy (memory-bound),
a large allocation with no work (memory held, GPU idle), bursty small kernels
(30% duty cycle), idle. Prints one JSON line per phase:
{"phase": "matmul", "start": <unix s>, "end": <unix s>} and writes them all to --out.

    python3 bench/gpu_workload.py --seconds idle=20,matmul=40,copy=30,hold=60,bursty=30,idle2=15
"""

import argparse
import json
import sys
import time

DEFAULT = "idle=20,matmul=40,copy=30,hold=60,bursty=30,idle2=15"


def parse_plan(text: str) -> list[tuple[str, float]]:
    plan = []
    for part in text.split(","):
        name, _, seconds = part.partition("=")
        try:
            duration = float(seconds)
        except ValueError:
            raise SystemExit(f"gpu_workload: error: bad phase {part!r} (use name=seconds)") from None
        if name.rstrip("0123456789") not in ("idle", "matmul", "copy", "hold", "bursty") or duration <= 0:
            raise SystemExit(f"gpu_workload: error: bad phase {part!r}")
        plan.append((name, duration))
    return plan


def run_phase(torch, name: str, seconds: float, hold_gib: float) -> None:
    kind = name.rstrip("0123456789")
    deadline = time.time() + seconds
    if kind == "idle":
        time.sleep(seconds)
    elif kind == "matmul":
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while time.time() < deadline:
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
        del a, b
    elif kind == "copy":
        src = torch.empty(2 * 1024**3, device="cuda", dtype=torch.uint8)
        dst = torch.empty_like(src)
        while time.time() < deadline:
            for _ in range(10):
                dst.copy_(src)
            torch.cuda.synchronize()
        del src, dst
    elif kind == "hold":
        block = torch.empty(int(hold_gib * 1024**3), device="cuda", dtype=torch.uint8)
        block.fill_(1)
        torch.cuda.synchronize()
        time.sleep(max(0.0, deadline - time.time()))
        del block
    elif kind == "bursty":
        x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
        while time.time() < deadline:
            busy_until = time.time() + 0.03
            while time.time() < busy_until:
                x @ x
            torch.cuda.synchronize()
            time.sleep(0.07)
        del x
    torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", default=DEFAULT, help=f"phase=seconds list (default {DEFAULT})")
    parser.add_argument("--hold-gib", type=float, default=100.0, help="GiB allocated in the hold phase")
    parser.add_argument("--out", help="write the phase list as JSON here")
    args = parser.parse_args()
    plan = parse_plan(args.seconds)
    try:
        import torch
    except ImportError:
        print("gpu_workload: error: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_workload: error: no CUDA GPU visible", file=sys.stderr)
        return 2
    torch.ones(1, device="cuda")
    phases = []
    for name, seconds in plan:
        start = time.time()
        run_phase(torch, name, seconds, args.hold_gib)
        phase = {"phase": name, "start": start, "end": time.time()}
        phases.append(phase)
        print(json.dumps(phase), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(phases, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
