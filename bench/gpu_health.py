"""Health verdict and diagnostics bundle on a real GPU host (no console needed).

    python3 bench/gpu_health.py --out "$OUT"

1. the nvml backend's health step (``NvmlSource.sample_health``): the "health" events it
   would send, their cost per GPU (median of --repeat reads) and that a second read with
   nothing changed sends nothing;
2. the verdict of each GPU and of the host (monitoring/health.py) from those facts, the
   fast readings and the XID errors this boot's kernel log names;
3. the diagnostics bundle (agent/diagnostics.py), timed, with its manifest.
Writes health.json, diagnostics-manifest.json, bundle.tar.gz (when under 16 MiB) and
health.md (the summary) to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent import diagnostics  # noqa: E402
from agent.backends.nvml import NvmlSource  # noqa: E402
from monitoring import health  # noqa: E402

XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)")


def xids_by_bus(kernel_log: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for bus, code in XID_LINE.findall(kernel_log):
        out.setdefault(bus.lower(), []).append(int(code))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    source = NvmlSource(host=socket.gethostname())
    source.open()
    nv = source.nv
    events = source.sample_health()
    again = source.sample_health()
    costs = {}
    for gpu in source.gpus:
        took = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            diagnostics.health_facts(nv, gpu.handle)
            took.append(time.perf_counter() - start)
        costs[gpu.uuid] = {"median_us": round(statistics.median(took) * 1e6, 1), "max_us": round(max(took) * 1e6, 1)}

    bundle_path = os.path.join(args.out, "bundle.tar.gz")
    started = time.perf_counter()
    manifest = diagnostics.collect(bundle_path, nv=nv)
    collect_s = time.perf_counter() - started
    with tarfile.open(bundle_path) as tar:
        member = tar.extractfile("kernel-nvrm.log") if "kernel-nvrm.log" in tar.getnames() else None
        kernel = member.read().decode(errors="replace") if member else ""
        report = json.loads(tar.extractfile("nvml.json").read())
    xids = xids_by_bus(kernel)

    facts = {e["gpu"]: e["event"]["facts"] for e in events}
    verdicts, gpus = {}, []
    for entry in report["gpus"]:
        bus = (entry.get("pci_bus_id") or "").lower()
        codes = next((v for k, v in xids.items() if k and bus.endswith(k[-12:])), [])
        verdict = health.judge(facts=facts.get(entry.get("uuid")) or entry.get("facts"), metrics=entry, xids=codes)
        verdicts[entry["index"]] = verdict
        gpus.append({"index": entry["index"], "uuid": entry.get("uuid"), "name": entry.get("name"),
                     "facts": facts.get(entry.get("uuid")), "xids": codes, "verdict": verdict.as_dict(),
                     "facts_cost": costs.get(entry.get("uuid"))})
    host = health.host_verdict(verdicts)
    result = {"host_verdict": host.as_dict(), "gpus": gpus, "health_events": len(events),
              "health_events_unchanged": len(again), "collect_s": round(collect_s, 3),
              "bundle_bytes": os.path.getsize(bundle_path), "driver": report.get("driver"),
              "cuda_driver": report.get("cuda_driver")}
    with open(os.path.join(args.out, "health.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "diagnostics-manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    if os.path.getsize(bundle_path) > 16 * 1024 * 1024:
        os.remove(bundle_path)
    lines = [f"# Health and diagnostics on {manifest['host']}", "",
             f"driver {report.get('driver')}, CUDA driver {report.get('cuda_driver')}, kernel "
             f"{manifest['versions'].get('kernel')}", "",
             f"host verdict: **{host.state}** ({host.summary})", "",
             "| GPU | name | verdict | facts (health event) | facts read, median / max |", "|---|---|---|---|---|"]
    for g in gpus:
        cost = g["facts_cost"] or {}
        lines.append(f"| {g['index']} | {g['name']} | {g['verdict']['state']}: {g['verdict']['summary']} | "
                     f"{json.dumps(g['facts'], sort_keys=True)} | {cost.get('median_us')} / {cost.get('max_us')} µs |")
    lines += ["", f"health events: {len(events)} on the first read, {len(again)} on a second read with nothing changed",
              "", f"bundle: {result['bundle_bytes']:,} bytes in {collect_s:.2f} s", "",
              "| item | status | bytes | note |", "|---|---|---|---|"]
    for item in manifest["items"]:
        note = item.get("note") or (f"rc {item['rc']}, {item.get('seconds')} s" if "rc" in item else "")
        lines.append(f"| {item['name']} | {item['status']} | {item.get('bytes', '')} | {note} |")
    with open(os.path.join(args.out, "health.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
