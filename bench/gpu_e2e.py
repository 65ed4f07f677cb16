"""End to end on a real GPU: console + nvml agent + a scripted workload, read back per phase.

Run on a machine with an NVIDIA GPU and the project importable (bench/gpu_e2e.sh sets that
up from carried wheels). It serves the console on loopback with SQLite, registers the host,
runs `gpuconsole-agent --backend nvml` against it, pins an instance to the GPU, drives the
GPU through bench/gpu_workload.py's phases and then reads back, through the console's own
metrics and alerts API, per phase: utilization, tensor activity, SM occupancy, DRAM
bandwidth, memory used, power, temperature and clocks (throttle reasons from the stored
raw samples). It checks what must hold and writes a markdown table and JSON to --out.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOST = "h200-e2e"
PORT = 8765
BASE = f"http://127.0.0.1:{PORT}"
METRICS = [
    "gpu_util", "tensor_active_pct", "sm_occupancy_pct", "dram_bw_util_pct", "mem_used",
    "power_mw", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "fan_pct", "nvlink_tx_bytes",
]
THROTTLE = {0x1: "idle", 0x4: "sw power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal",
            0x80: "hw power brake", 0x100: "display clocks"}


AGENT_EVENTS = ("xid", "gpu_lost", "gpu_back")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def setup_django(var: Path) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def prepare() -> tuple[str, str]:
    """An operator with an API token and a host token for HOST."""
    from django.contrib.auth.models import User

    from console import services as console_services
    from instances.models import Region
    from monitoring import services as monitoring_services

    Region.objects.get_or_create(name="lab-1", defaults={"display_name": "Lab"})
    ops, _ = User.objects.get_or_create(username="e2e-ops", defaults={"is_staff": True})
    _, api_token = console_services.create_api_token(actor=ops, user=ops, name="e2e")
    host, _ = monitoring_services.ensure_host(actor=ops, name=HOST, region="lab-1")
    _, host_token = monitoring_services.create_host_token(actor=ops, host=host, name="e2e")
    return api_token, host_token


# The idle rule looks back over its hold time (30 min by default); the run's hold phase
# lasts 60 s, so the team's rule is shortened the way a team admin would.
IDLE_HOLD_S = 30
ON_DEMAND_HOURLY = "3.50"


def pin_instance(uuid: str, *, idle_hold_s: int = IDLE_HOLD_S, at: datetime | None = None) -> int:
    """A team's running on-demand instance holding the GPU, so samples are attributed and
    idle is judged: the GPU's model is priced from ``at`` (as an operator sets a price)
    and the team's idle rule looks back ``idle_hold_s``."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from console import services as console_services
    from console.models import Team
    from instances import lifecycle
    from instances.models import Gpu

    at = at or timezone.now()
    ops = User.objects.get(username="e2e-ops")
    gpu = Gpu.objects.select_related("host", "model").get(uuid=uuid)
    price_model(ops, gpu.model.name, at)
    team = Team.objects.filter(name="Lab").first() or console_services.create_team(actor=ops, name="Lab")
    shorten_idle_rule(ops, team, idle_hold_s)
    instance = lifecycle.launch_instance(
        actor=ops, team=team, name="e2e-job", gpu_model=gpu.model, gpu_count=1, pricing_model="on_demand",
        host=gpu.host, provision=False, at=at,
    )
    lifecycle.mark_running(instance=instance, at=at)
    return instance.pk


def price_model(ops, sku: str, at: datetime) -> None:
    """An on-demand price for ``sku`` in effect from ``at``, unless one already is."""
    from billing import price_changes as billing_price_changes
    from billing import prices as billing_prices

    if sku not in billing_prices.in_effect(billing_prices.ON_DEMAND, [sku], at):
        billing_price_changes.set_price(actor=ops, sku=sku, kind="on_demand", hourly=ON_DEMAND_HOURLY,
                                   effective_from=at, now=at)


def shorten_idle_rule(ops, team, hold_s: int) -> None:
    from alerting import services as alerting_services
    from alerting.models import AlertRule

    alerting_services.ensure_default_rules(team, actor=ops)
    for rule in AlertRule.objects.filter(team=team, metric="idle_billed"):
        alerting_services.update_rule(actor=ops, rule=rule, hold_s=hold_s)


def api(path: str, *, token: str, **params) -> dict:
    query = urllib.parse.urlencode(params, doseq=True)
    req = urllib.request.Request(f"{BASE}{path}?{query}", headers={"Authorization": f"Token {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"gpu_e2e: error: {path} answered {exc.code}: {exc.read()[:300]!r}") from None


def wait_for(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"gpu_e2e: error: timed out waiting for {what}")


def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def phase_row(get, uuid: str, phase: dict) -> dict:
    """The phase's means through the metrics API; ``get(path, **params)`` answers its JSON."""
    start, end = phase["start"] + 2.0, phase["end"] - 1.0  # leave out the transitions
    body = get(f"/api/v1/gpus/{uuid}/metrics/", metric=METRICS, start=f"{start:.3f}", end=f"{end:.3f}")
    series = body["series"]
    row = {"phase": phase["phase"], "seconds": round(phase["end"] - phase["start"], 1), "tier": body["tier"]}
    for name in METRICS:
        points = series.get(name) or {}
        row[name] = mean(points.get("avg") or [])
        row[name + "_points"] = len([v for v in (points.get("avg") or []) if v is not None])
    row["throttle"] = throttle_reasons(uuid, start, end)
    return row


def throttle_reasons(uuid: str, start: float, end: float) -> list[str]:
    from monitoring.models import Sample

    masks = set(
        Sample.objects.filter(
            gpu__uuid=uuid, time__gte=datetime.fromtimestamp(start, UTC), time__lt=datetime.fromtimestamp(end, UTC)
        ).values_list("clocks_event_reasons", flat=True)
    )
    names = {label for mask in masks if mask for bit, label in THROTTLE.items() if mask & bit}
    return sorted(names) or ["none"]


def integrity(uuid: str) -> dict:
    from django.db.models import Count

    from monitoring.models import AgentSession, GpuEvent, Sample

    sessions = list(AgentSession.objects.filter(host__name=HOST).values("boot_id", "last_seq"))
    rows = Sample.objects.filter(gpu__uuid=uuid)
    dupes = rows.values("time").annotate(n=Count("id")).filter(n__gt=1).count()
    times = sorted(t.timestamp() for t in rows.values_list("time", flat=True))
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return {
        "records_acked": sum(s["last_seq"] for s in sessions),
        "samples_stored": rows.count(),
        # events the agent sent (records with a seq), not the server's own notes
        "events_stored": GpuEvent.objects.filter(gpu__uuid=uuid, kind__in=AGENT_EVENTS).count(),
        "duplicate_timestamps": dupes,
        "largest_gap_s": round(max(gaps), 3) if gaps else None,
        "boots": len(sessions),
    }


def replay_phases(trace: Path, uuid: str, dest: Path) -> None:
    """Wait out the replayed trace and write its phases, placed where the replay put them."""
    from monitoring.models import Sample

    lines = trace_lines(trace)
    first = wait_for(lambda: Sample.objects.filter(gpu__uuid=uuid).order_by("time").values_list("time", flat=True).first(),
                     "the first replayed sample")
    offset = first.timestamp() - lines[0]["t"]
    log(f"replaying {lines[-1]['t'] - lines[0]['t']:.0f} s of trace")
    time.sleep(max(0.0, lines[-1]["t"] + offset - time.time()) + 2)
    dest.write_text(json.dumps(trace_phases(lines, offset)))


def trace_lines(trace: Path) -> list[dict]:
    return [json.loads(line) for line in trace.read_text().splitlines()[1:] if line.strip()]


def trace_phases(lines: list[dict], offset: float) -> list[dict]:
    """[{phase, start, end}] of a recorded trace's lines, moved by ``offset`` seconds; a
    phase that comes back gets a "2" ("idle2")."""
    phases: dict[str, dict] = {}
    for line in lines:
        name = line["phase"] if line["phase"] not in phases or phases[line["phase"]]["open"] else line["phase"] + "2"
        for other in phases.values():
            if other["phase"] != name:
                other["open"] = False
        entry = phases.setdefault(name, {"phase": name, "start": line["t"] + offset, "open": True})
        entry["end"] = line["t"] + offset
    return [{k: v for k, v in p.items() if k != "open"} for p in phases.values()]


def fmt(value, scale=1.0, digits=0) -> str:
    return "absent" if value is None else f"{value / scale:.{digits}f}"


def table(rows: list[dict]) -> str:
    lines = [
        "| phase | s | GPU util % | tensor % | SM occupancy % | DRAM bw % | memory used GB | power W | temp °C | SM MHz | mem MHz | throttle reasons |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['phase']} | {r['seconds']:.0f} | {fmt(r['gpu_util'])} | {fmt(r['tensor_active_pct'])} | "
            f"{fmt(r['sm_occupancy_pct'])} | {fmt(r['dram_bw_util_pct'])} | {fmt(r['mem_used'], 1e9, 1)} | "
            f"{fmt(r['power_mw'], 1000)} | {fmt(r['temp_c'])} | {fmt(r['sm_clock_mhz'])} | {fmt(r['mem_clock_mhz'])} | "
            f"{', '.join(r['throttle'])} |"
        )
    return "\n".join(lines)


def checks(rows: list[dict], alerts: list[dict], phases: dict, facts: dict) -> list[tuple[str, bool]]:
    by = {r["phase"]: r for r in rows}
    out = []
    m, c, h = by.get("matmul"), by.get("copy"), by.get("hold")
    if m:
        out.append(("matmul: utilization ≥ 95%", (m["gpu_util"] or 0) >= 95))
        out.append(("matmul: tensor activity ≥ 50%", (m["tensor_active_pct"] or 0) >= 50))
    if c:
        out.append(("copy: utilization ≥ 90%", (c["gpu_util"] or 0) >= 90))
        out.append(("copy: tensor activity ≤ 5%", (c["tensor_active_pct"] if c["tensor_active_pct"] is not None else 100) <= 5))
    if h:
        out.append(("hold: ≥ 95 GB in use", (h["mem_used"] or 0) >= 95e9))
        out.append(("hold: utilization ≤ 5%", (h["gpu_util"] if h["gpu_util"] is not None else 100) <= 5))
        hold = phases["hold"]
        opened = [a for a in alerts if hold["start"] <= datetime.fromisoformat(a["opened_at"]).timestamp() <= hold["end"] + 20]
        out.append(("hold: idle alert raised", bool(opened)))
    if c:
        copy = phases["copy"]
        wrong = [a for a in alerts if copy["start"] <= datetime.fromisoformat(a["opened_at"]).timestamp() <= copy["end"]]
        out.append(("copy: no idle alert", not wrong))
    out.append(("no sample missing: stored = acked − events", facts["samples_stored"] == facts["records_acked"] - facts["events_stored"]))
    out.append(("no sample duplicated", facts["duplicate_timestamps"] == 0))
    out.append(("unsupported fan absent, not 0", all(r["fan_pct"] is None for r in rows)))
    out.append(("unsupported NVLink absent, not 0", all(r["nvlink_tx_bytes"] is None for r in rows)))
    return out


def run_env() -> dict:
    return os.environ | {
        "INPROCESS_SCHEDULER": "true",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
        "PYTHONUNBUFFERED": "1",
    }


def serve_console(env: dict, out: Path) -> subprocess.Popen:
    log("serving the console")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(PORT), "gpuconsole.asgi:application"],
        cwd=ROOT, env=env, stdout=open(out / "server.log", "w"), stderr=subprocess.STDOUT,
    )
    wait_for(lambda: urllib.request.urlopen(BASE + "/healthz", timeout=2).status == 200, "the console")
    return proc


def start_agent(env: dict, out: Path, var: Path, token_file: Path, source: list[str]) -> subprocess.Popen:
    log(f"starting the agent ({' '.join(source)})")
    return subprocess.Popen(
        [sys.executable, "-m", "agent", *source, "--server", f"ws://127.0.0.1:{PORT}/ws/agent/",
         "--token-file", str(token_file), "--host", HOST, "--spool-dir", str(var / "spool")],
        cwd=ROOT, env=env, stdout=open(out / "agent.log", "w"), stderr=subprocess.STDOUT,
    )


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-e2e"), help="folder for the table and JSON")
    parser.add_argument("--seconds", default="idle=15,matmul=35,copy=30,hold=60,bursty=30,idle2=10")
    parser.add_argument("--interval", type=float, default=0.2, help="agent sampling period (s)")
    parser.add_argument(
        "--dry-run-trace", metavar="TRACE",
        help="no GPU: replay this recorded trace instead of the nvml agent and the workload (checks the pipeline)",
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    var = Path(os.environ.setdefault("GPUCONSOLE_VAR_DIR", "/tmp/gpc-e2e-var"))
    var.mkdir(parents=True, exist_ok=True)
    env = run_env()
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    setup_django(var)
    api_token, host_token = prepare()
    token_file = var / "host.token"
    token_file.write_text(host_token)
    token_file.chmod(0o600)
    procs = []
    try:
        procs.append(serve_console(env, out))
        source = ["--backend", "replay", "--trace", args.dry_run_trace] if args.dry_run_trace else [
            "--backend", "nvml", "--interval", str(args.interval)]
        agent = start_agent(env, out, var, token_file, source)
        procs.append(agent)
        gpus = wait_for(lambda: api("/api/v1/gpus/", token=api_token, host__name=HOST)["results"], "the agent's hello")
        uuid = gpus[0]["uuid"]
        log(f"GPU {uuid} ({gpus[0]['model']}) registered; pinning an instance to it")
        pin_instance(uuid)
        if args.dry_run_trace:
            replay_phases(Path(args.dry_run_trace), uuid, out / "phases.json")
        else:
            log("driving the GPU: " + args.seconds)
            subprocess.run(
                [sys.executable, str(ROOT / "bench" / "gpu_workload.py"), "--seconds", args.seconds,
                 "--out", str(out / "phases.json")],
                cwd=ROOT, env=env, check=True,
            )
        time.sleep(20)  # the last samples are acked and the alert task has run
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        phases = {p["phase"]: p for p in json.loads((out / "phases.json").read_text())}
        rows = [phase_row(functools.partial(api, token=api_token), uuid, p)
                for p in phases.values() if p["end"] - p["start"] >= 5]
        alerts = api("/api/v1/alerts/", token=api_token, kind="idle", page_size=100)["results"]
        facts = integrity(uuid)
        results = checks(rows, alerts, phases, facts)
    finally:
        stop(procs)
    from django.conf import settings  # noqa: F401

    driver = ""
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    except Exception:  # noqa: BLE001 - report what we can
        name = gpus[0]["model"]
    report = [
        f"GPU: {name}, driver {driver}, agent interval {args.interval} s, {datetime.now(UTC):%Y-%m-%d}",
        "",
        table(rows),
        "",
        "Integrity: " + ", ".join(f"{k} {v}" for k, v in facts.items()),
        "Idle alerts: " + "; ".join(f"{a['state']} at {a['opened_at']}: {a['message']}" for a in alerts) if alerts else "Idle alerts: none",
        "",
        *[f"- [{'x' if ok else ' '}] {what}" for what, ok in results],
    ]
    text = "\n".join(report)
    print(text)
    (out / "e2e.md").write_text(text + "\n")
    (out / "e2e.json").write_text(json.dumps({"rows": rows, "alerts": alerts, "facts": facts, "checks": results}, indent=1, default=str))
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
