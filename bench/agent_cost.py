"""What the agent costs per GPU-sample: CPU time, wall time and memory, per backend.

Each backend runs in a subprocess of its own (so its peak RSS is its own), samples
as fast as it can into a null sink (the agent's outbox: records are numbered,
cleaned and JSON-encoded exactly as for sending, then thrown away), and reports.

    python bench/agent_cost.py                    # sim (1,000 GPUs) and replay, side by side
    python bench/agent_cost.py --backend nvml     # on a GPU host: nvml beside sim and replay
    python bench/agent_cost.py --spool            # also write every record to a spool and ack it

A GPU-sample is one GPU read once on the fast path, with its share of the slow set
(energy, counters, GPM) at the default 1 s : 5 s cadence.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TRACE = REPO.parent / "shared" / "telemetry" / "h200_mixed.jsonl"
SLOW_EVERY = 5


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Sink:
    """The agent's outbox, emptied after every step; optionally a spool behind it."""

    def __init__(self, spool: bool):
        from monitoring.agent.outbox import Outbox

        self.outboxes: dict[str, Outbox] = {}
        self.spools = {}
        self.tmp = tempfile.TemporaryDirectory() if spool else None
        self.make_outbox = lambda: Outbox("0" * 32)

    def emit(self, host: str, records: list[dict]) -> None:
        box = self.outboxes.get(host)
        if box is None:
            box = self.outboxes[host] = self.make_outbox()
        box.put(records)
        rows = box.take()
        if self.tmp is not None and rows:
            self._spool(host, rows)

    def _spool(self, host: str, rows) -> None:
        from monitoring.agent.spool import Spool

        spool = self.spools.get(host)
        if spool is None:
            spool = self.spools[host] = Spool(Path(self.tmp.name) / host, max_records=10**7)
        spool.append("0" * 32, rows)
        spool.ack("0" * 32, rows[-1][0])


def sim_step(args):
    from monitoring.agent.backends.sim import SimSource

    source = SimSource.synthetic(args.hosts, args.gpus, slow_interval=float(SLOW_EVERY))

    def step(sink: Sink) -> int:
        for host, records in source.tick().items():
            sink.emit(host, records)
        return args.hosts * args.gpus

    return step, f"{args.hosts * args.gpus} GPUs"


def replay_step(args):
    from monitoring.agent.backends.replay import ReplaySource, Trace

    if not Path(args.trace).exists():
        raise SystemExit(f"agent_cost: trace {args.trace} not found (give --trace PATH)")
    source = ReplaySource(Trace.load(args.trace), host="bench", speed=1000)
    frames = source.frames()

    def step(sink: Sink) -> int:
        _, line, m = next(frames)
        sink.emit("bench", [source.record(line, m, time.time())])
        return 1

    return step, "1 GPU (trace)"


def nvml_step(args):
    from monitoring.agent.backends.nvml import NvmlSource, NvmlUnavailable

    source = NvmlSource(host="bench")
    try:
        source.open()
    except NvmlUnavailable as exc:
        raise SystemExit(f"agent_cost: {exc}") from None
    count = [0]

    def step(sink: Sink) -> int:
        sink.emit("bench", source.sample_fast())
        if count[0] % SLOW_EVERY == 0:
            sink.emit("bench", source.sample_slow())
        count[0] += 1
        return len(source.gpus)

    return step, f"{len(source.gpus)} GPU(s)"


STEPS = {"sim": sim_step, "replay": replay_step, "nvml": nvml_step}


def child(args) -> None:
    sink = Sink(args.spool)
    step, what = STEPS[args.child](args)
    step(sink)  # warm up: imports, first allocations
    samples = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < args.seconds:
        samples += step(sink)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"backend": args.child, "what": what, "samples": samples,
                      "cpu_us": cpu / samples * 1e6, "wall_us": wall / samples * 1e6,
                      "rss_mib": peak_rss_mib(), "spool": args.spool}))  # fmt: skip


def measure(backend: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", backend, "--seconds", str(args.seconds),
           "--hosts", str(args.hosts), "--gpus", str(args.gpus), "--trace", str(args.trace)]  # fmt: skip
    if args.spool:
        cmd.append("--spool")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return {"backend": backend, "error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    rows = [
        "| backend | GPUs | GPU-samples | CPU µs / GPU-sample | wall µs / GPU-sample | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['backend']} | — | — | — | — | {r['error']} |")
            continue
        rows.append(f"| {r['backend']}{' + spool' if r['spool'] else ''} | {r['what']} | "
                    f"{r['samples']:,} | {r['cpu_us']:.1f} | {r['wall_us']:.1f} | "
                    f"{r['rss_mib']:.1f} |")  # fmt: skip
    return "\n".join(rows)


def ratios(results: list[dict]) -> list[str]:
    ok = {r["backend"]: r for r in results if "error" not in r}
    lines = []
    if "sim" in ok and "replay" in ok:
        sim, rep = ok["sim"], ok["replay"]
        lines.append(f"- replay / sim CPU per GPU-sample: {rep['cpu_us'] / sim['cpu_us']:.2f}x")
        lines.append(f"- replay / sim peak RSS: {rep['rss_mib'] / sim['rss_mib']:.2f}x")
    if "nvml" in ok and "sim" in ok:
        lines.append(
            f"- nvml / sim CPU per GPU-sample: {ok['nvml']['cpu_us'] / ok['sim']['cpu_us']:.2f}x"
        )
    for name, r in ok.items():
        if name == "nvml":
            share = r["cpu_us"] * 8 / 1e6 * 100
            lines.append(f"- nvml: an 8-GPU host at 1 Hz would take {share:.2f}% of one core")
        else:
            share = r["cpu_us"] * 1000 / 1e6 * 100
            lines.append(f"- {name}: 1,000 GPUs at 1 Hz would take {share:.1f}% of one core")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", action="append", choices=sorted(STEPS),
                   help="add a backend (sim and replay are always measured)")  # fmt: skip
    p.add_argument("--seconds", type=float, default=3.0, help="time per backend (default 3)")
    p.add_argument("--hosts", type=int, default=125, help="sim hosts (default 125)")
    p.add_argument("--gpus", type=int, default=8, help="sim GPUs per host (default 8)")
    p.add_argument("--trace", default=str(TRACE), help="trace for the replay backend")
    p.add_argument("--spool", action="store_true", help="also spool and ack every record")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--child", choices=sorted(STEPS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    backends = ["sim", "replay", *[b for b in args.backend or [] if b not in ("sim", "replay")]]
    results = [measure(b, args) for b in backends]
    print(table(results))
    print()
    print("\n".join(ratios(results)))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
