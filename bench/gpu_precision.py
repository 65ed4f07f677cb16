"""The TFLOP/s estimate through the console on a real GPU, per precision, and its history.

Run on a machine with an NVIDIA GPU (Hopper: GPM) and torch, the project importable
(bench/gpu_session.sh sets that up). It serves the console on loopback with SQLite,
runs the nvml agent against it, pins an instance to the GPU, and for each of bf16, fp16,
tf32 and fp8 runs an 8192³ matrix product in a process of its own that declares its
precision (GPUCONSOLE_PRECISION) and counts the FLOPs it did. Then it reads each
phase's tflops_est back through the instance metrics API and compares it with the
counted TFLOP/s (goal: within ±15%), checks that the precision in force in each window
is the one the workload declared, sets the instance's precision as the team (bf16), and
reads every window again: the past must not change.

    python3 bench/gpu_precision.py --out /tmp/gpu-precision     # writes precision.md/.json
    python3 bench/gpu_precision.py --worker tf32 --seconds 20    # one phase alone (used inside)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_e2e as e2e  # noqa: E402

PHASES = ("bf16", "fp16", "tf32", "fp8")
N = 8192
GOAL = 0.15


def worker(precision: str, seconds: float) -> None:
    """One precision's matrix products for ``seconds``; prints what it counted as JSON."""
    import torch
    from tflops_calibration import make_step

    step, work = make_step(torch, precision, N)
    if step is None:
        print(json.dumps({"precision": precision, "skipped": "torch has no fp8 matrix product here"}))
        return
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    batch = max(10, int(2e11 // work))
    steps, begin = 0, time.time()
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start_event.record()
    while time.time() - begin < seconds:
        for _ in range(batch):
            step()
        steps += batch
        torch.cuda.synchronize()
    end_event.record()
    torch.cuda.synchronize()
    elapsed = start_event.elapsed_time(end_event) / 1000
    print(json.dumps({"precision": precision, "start": begin, "end": time.time(), "steps": steps,
                      "counted_tflops": round(work * steps / elapsed / 1e12, 1)}))


def run_phase(precision: str, seconds: float, env: dict) -> dict:
    e2e.log(f"{precision}: {N}³ matrix products for {seconds:.0f} s, GPUCONSOLE_PRECISION={precision}")
    done = subprocess.run(
        [sys.executable, __file__, "--worker", precision, "--seconds", str(seconds)],
        cwd=ROOT, env=env | {"GPUCONSOLE_PRECISION": precision}, check=True, capture_output=True, text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_window(get, instance_id: int, uuid: str, phase: dict) -> dict:
    """The phase's mean tflops_est (transitions left out) and the bases in force."""
    start, end = phase["start"] + 3.0, phase["end"] - 1.0
    body = get(f"/api/v1/instances/{instance_id}/metrics/", metric="tflops_est", start=f"{start:.3f}", end=f"{end:.3f}")
    values = body["gpus"].get(uuid, {}).get("tflops_est", {}).get("avg") or []
    bases = body["tflops_bases"].get(uuid, [])
    return {"estimate": round(statistics.fmean(values), 1) if values else None, "points": len(values),
            "bases": [(b["precision"], b.get("declared")) for b in bases]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-precision"))
    parser.add_argument("--seconds", type=float, default=20.0, help="per precision")
    parser.add_argument("--worker", choices=PHASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.seconds)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    var = Path(os.environ.setdefault("GPUCONSOLE_VAR_DIR", "/tmp/gpc-precision-var"))
    var.mkdir(parents=True, exist_ok=True)
    env = e2e.run_env()
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    e2e.setup_django(var)
    api_token, host_token = e2e.prepare()
    token_file = var / "host.token"
    token_file.write_text(host_token)
    get = functools.partial(e2e.api, token=api_token)
    procs = []
    try:
        procs.append(e2e.serve_console(env, out))
        procs.append(e2e.start_agent(env, out, var, token_file, ["--backend", "nvml", "--interval", "1"]))
        gpus = e2e.wait_for(lambda: get("/api/v1/gpus/", host__name=e2e.HOST)["results"], "the agent's hello")
        uuid = gpus[0]["uuid"]
        instance_id = e2e.pin_instance(uuid)
        phases = []
        for precision in PHASES:
            phases.append(run_phase(precision, args.seconds, env))
            time.sleep(3)
        time.sleep(5)  # the last readings are stored
        first = {p["precision"]: read_window(get, instance_id, uuid, p) for p in phases if "start" in p}
        history = change_precision(instance_id)
        again = {p["precision"]: read_window(get, instance_id, uuid, p) for p in phases if "start" in p}
    finally:
        e2e.stop(procs)
    rows, results = report(phases, first, again)
    text = "\n".join([
        f"GPU {gpus[0]['model']} ({uuid}), {N}³ matrix products, {args.seconds:.0f} s each, agent at 1 s; "
        f"then the team set {history}.", "", *rows, "", *[f"- [{'x' if ok else ' '}] {what}" for what, ok in results],
    ])
    print(text)
    (out / "precision.md").write_text(text + "\n")
    (out / "precision.json").write_text(json.dumps({"phases": phases, "first": first, "again": again,
                                                    "checks": results}, indent=1))
    return 0 if all(ok for _, ok in results) else 1


def change_precision(instance_id: int) -> str:
    from django.contrib.auth.models import User

    from instances import lifecycle
    from instances.models import Instance

    instance = Instance.objects.get(pk=instance_id)
    before = instance.precision
    lifecycle.set_precision(actor=User.objects.get(username="e2e-ops"), instance=instance, precision="bf16")
    return f"the instance's precision from {before} to bf16"


def report(phases: list[dict], first: dict, again: dict) -> tuple[list[str], list[tuple[str, bool]]]:
    rows = ["| precision | counted TFLOP/s | tflops_est | est / counted | precision in force (declared by) "
            "| after the change |", "|---|---:|---:|---:|---|---:|"]
    results = []
    for phase in phases:
        p = phase["precision"]
        if "start" not in phase:
            rows.append(f"| {p} | skipped: {phase.get('skipped')} | | | | |")
            continue
        est, counted = first[p]["estimate"], phase["counted_tflops"]
        ratio = est / counted if est else None
        rows.append(f"| {p} | {counted:,.1f} | {est if est is not None else 'absent'} | "
                    f"{f'{ratio:.3f}' if ratio else '—'} | {', '.join(f'{a} ({b})' for a, b in first[p]['bases'])} "
                    f"| {again[p]['estimate']} |")
        results.append((f"{p}: tflops_est within ±{GOAL:.0%} of the counted TFLOP/s",
                        ratio is not None and abs(ratio - 1) <= GOAL))
        results.append((f"{p}: the precision in force is the declared one",
                        bool(first[p]["bases"]) and first[p]["bases"][-1] == (p, "workload")))
        results.append((f"{p}: unchanged after the precision change", again[p]["estimate"] == est))
    return rows, results


if __name__ == "__main__":
    sys.exit(main())
