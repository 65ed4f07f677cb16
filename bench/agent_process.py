"""The agent as a whole running process, beside the tools people run today, at 1 Hz.

Every tool runs as its own process, all at the same time, for the same window, each
reading the same GPU(s) once a second:

- agent      - ``gpuconsole-agent --backend nvml`` at its default cadences (fast and
               GPM 1 s, counters 60 s), XID watcher on, streaming every record over a
               websocket to a sink on loopback that answers like the console (hello ->
               welcome, each samples frame -> ack of its last seq; not a console:
               nothing is stored, so the figures are the agent's alone);
- agent-thread - the same, its sampling tick on a thread of its own instead of the
               event loop (the layout before; for comparison);
- agent-console - the same agent streaming to the real console instead of the sink:
               daphne serving gpuconsole.asgi on SQLite (a fresh var dir, its own
               process, not measured), a registered host and host token per device
               count; so the figure includes what the console's frames and acks cost
               the agent;
- agent-before - with --before DIR: the agent of another checkout (DIR, its repo
               root) at its own defaults, the same way (to compare versions in one run);
- bare       - a plain pynvml loop over the fast fields, sleeping to the next second;
- nvitop     - nvitop's ``Device`` API for the same fields, the same loop;
- nvidia-smi - ``nvidia-smi --query-gpu=... -l 1`` (its own 1 s loop; 1 GPU only).

CPU is read from /proc for the whole process (every thread): the sum of each task's
on-CPU nanoseconds (/proc/PID/task/*/schedstat) and, as a coarser cross-check, utime +
stime in clock ticks (/proc/PID/stat). It is read after a warm-up (imports, NVML init,
the first connection) and again after --seconds; RSS is VmRSS and VmHWM at the end.
A GPU-sample is one device read once a second, so CPU per GPU-sample is the window's
CPU / (devices × seconds).

"8 simulated devices" multiplies the host's GPUs: the tools see 8 devices backed by
GPU 0 (distinct handles and, for the agent, distinct UUIDs), so each does eight
devices' worth of NVML calls, encoding and sending.

    python bench/agent_process.py --seconds 120                   # on a GPU host
    python bench/agent_process.py --fake --seconds 30 --tools agent,bare   # no GPU

``--fake`` replaces pynvml by bench/agent_cost.py's stand-in (answers at once), so the
figures show what the agent's own Python, event loop, spool and websocket cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TOOLS = ("agent", "agent-console", "agent-thread", "agent-before", "bare", "nvitop", "nvidia-smi")
TOKEN = "bench-agent-process-token"
SMI_FIELDS = ("utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,"
              "temperature.gpu,clocks.sm,clocks.mem,clocks_event_reasons.active,"
              "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total")  # fmt: skip
GOAL_NVITOP_X, GOAL_RSS_MIB = 2.0, 60.0


# -- the pynvml each tool sees ----------------------------------------------------------


class Multiplied:
    """pynvml with each real GPU seen `times` times: distinct handles and UUIDs, the same
    GPU behind them, so a tool does that many devices' worth of NVML calls."""

    def __init__(self, nv, times: int):
        self._nv, self._times = nv, times
        self._copy_of: dict[int, int] = {}
        self._keep = []

    def __getattr__(self, name):
        return getattr(self._nv, name)

    def nvmlDeviceGetCount(self):  # noqa: N802 (pynvml's names)
        return self._nv.nvmlDeviceGetCount() * self._times

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        real = self._nv.nvmlDeviceGetCount()
        handle = self._nv.nvmlDeviceGetHandleByIndex(index % real)
        if index < real:
            return handle
        import ctypes

        copy = ctypes.cast(handle, type(handle))
        self._keep.append(copy)
        self._copy_of[id(copy)] = index // real
        return copy

    def nvmlDeviceGetUUID(self, handle):  # noqa: N802
        uuid = self._nv.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        k = self._copy_of.get(id(handle), 0)
        return uuid if k == 0 else f"{uuid[:-2]}{k:02x}"


def pynvml_for(args):
    if args.fake:
        sys.path.insert(0, str(REPO / "bench"))
        from agent_cost import FakeNvml

        return FakeNvml(args.devices)
    import pynvml

    return Multiplied(pynvml, args.devices) if args.devices > 1 else pynvml


def every_second(step) -> None:
    """step() once a second on an absolute schedule, until SIGTERM."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    due = time.monotonic()
    while not stop:
        step()
        due += 1.0
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            due = time.monotonic()


# -- roles: each runs in its own process ------------------------------------------------


def role_agent(args) -> None:
    """The agent's own command line, in this process (so the pynvml it sees can be set).
    Only the standard library's light modules are loaded before it, as for the CLI."""
    sys.modules["pynvml"] = pynvml_for(args)
    if args.role == "agent-before":
        sys.path.insert(0, str(Path(args.before).resolve()))
    from agent.cli import main

    if args.role == "agent-thread":  # the same agent with its sampling tick on a thread
        from agent.backends.nvml import NvmlSource

        start = NvmlSource.start
        NvmlSource.start = lambda self, emit, loop=None: start(self, emit)

    spool = tempfile.mkdtemp(prefix="agent-process-spool-")
    token = Path(args.report).read_text().strip() if args.role == "agent-console" else TOKEN
    try:
        code = main(["--server", f"ws://127.0.0.1:{args.port}/ws/agent/", "--token", token,
                     "--host", console_host(args.devices) if args.role == "agent-console" else f"bench-{args.devices}",
                     "--spool-dir", spool, "--log-level", "warning"])  # fmt: skip
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    sys.exit(code)


def role_bare(args) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from nvml_tools import bare_step

    step, _ = bare_step(pynvml_for(args))
    every_second(step)


def role_nvitop(args) -> None:
    from nvitop import Device

    devices = Device.all() * args.devices

    def step() -> None:
        for d in devices:
            d.gpu_utilization()
            d.memory_utilization()
            d.memory_used()
            d.memory_total()
            d.power_usage()
            d.power_limit()
            d.temperature()
            d.sm_clock()
            d.memory_clock()
            d.total_volatile_uncorrected_ecc_errors()
            d.processes()

    every_second(step)


def role_sink(args) -> None:
    """A websocket endpoint that answers like the console: welcome, then one ack per
    samples frame (its last seq). Counts what it received; writes it to --report."""
    import asyncio

    from websockets.asyncio.server import serve

    seen = {"frames": 0, "records": 0, "out_of_order": 0, "hellos": 0}
    last = {}

    async def handle(ws):
        hello = json.loads(await ws.recv())
        seen["hellos"] += 1
        await ws.send(json.dumps({"type": "welcome", "v": 1, "host": hello["host"],
                                  "server_time": time.time()}))  # fmt: skip
        async for text in ws:
            frame = json.loads(text)
            records = frame["records"]
            for r in records:
                key = (hello["host"], frame["boot_id"])
                if r["seq"] <= last.get(key, 0):
                    seen["out_of_order"] += 1
                last[key] = r["seq"]
            seen["frames"] += 1
            seen["records"] += len(records)
            await ws.send(json.dumps({"type": "ack", "boot_id": frame["boot_id"],
                                      "seq": records[-1]["seq"]}))  # fmt: skip

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with serve(handle, "127.0.0.1", args.port):
            Path(args.report).write_text(json.dumps(seen))
            await stop.wait()
        Path(args.report).write_text(json.dumps(seen))

    asyncio.run(main())


def console_host(devices: int) -> str:
    return f"bench-console-{devices}"


class Console:
    """The real console under daphne on loopback (SQLite in a fresh var dir), with a host
    and a host token per device count, written to files the agents read."""

    def __init__(self, tmp: str, device_counts: list[int]):
        Path(tmp).mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.var = Path(tmp) / "console-var"
        self.env = os.environ | {"GPUCONSOLE_VAR_DIR": str(self.var), "INPROCESS_SCHEDULER": "true",
                                 "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                                 "DJANGO_SETTINGS_MODULE": "gpuconsole.settings"}  # fmt: skip
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=self.env, check=True)
        script = ("import django, sys; django.setup()\n"
                  "from django.contrib.auth.models import User\n"
                  "from instances.models import Region\n"
                  "from monitoring import services\n"
                  "Region.objects.get_or_create(name='lab-1', defaults={'display_name': 'Lab'})\n"
                  "ops, _ = User.objects.get_or_create(username='bench-ops', defaults={'is_staff': True})\n"
                  "for name, path in zip(sys.argv[1::2], sys.argv[2::2]):\n"
                  "    host, _ = services.ensure_host(actor=ops, name=name, region='lab-1')\n"
                  "    open(path, 'w').write(services.create_host_token(actor=ops, host=host)[1])\n")  # fmt: skip
        self.tokens = {d: str(Path(tmp) / f"token-{d}") for d in device_counts}
        argv = [x for d in device_counts for x in (console_host(d), self.tokens[d])]
        subprocess.run([sys.executable, "-c", script, *argv], cwd=REPO, env=self.env, check=True)
        self.log = open(Path(tmp) / "console.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "gpuconsole.asgi:application"],
            cwd=REPO, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise SystemExit("agent_process: error: the console did not start (see console.log)") from None
                time.sleep(0.1)

    def stored(self) -> dict:
        """Samples the console stored, per host (read after the agents stopped)."""
        import sqlite3

        with sqlite3.connect(self.var / "db.sqlite3") as db:
            rows = db.execute("SELECT h.name, COUNT(*) FROM monitoring_sample s JOIN instances_gpu g ON g.id = s.gpu_id "
                              "JOIN instances_host h ON h.id = g.host_id GROUP BY h.name").fetchall()  # fmt: skip
        return dict(rows)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


ROLES = {"agent": role_agent, "agent-console": role_agent, "agent-thread": role_agent, "agent-before": role_agent, "bare": role_bare, "nvitop": role_nvitop, "sink": role_sink}


# -- measuring from outside --------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ns(pid: int) -> int | None:
    """On-CPU nanoseconds of every live thread of pid (None where schedstat is absent)."""
    total, found = 0, False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
                found = True
        except (OSError, ValueError, IndexError):
            continue
    return total if found else None


def cpu_ticks_s(pid: int) -> float:
    """utime + stime of the whole process (dead threads included), in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_mib(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0]) / 1024
    return out


def snapshot(pid: int) -> dict:
    return {"ns": cpu_ns(pid), "ticks_s": cpu_ticks_s(pid), "wall": time.monotonic()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_role(role: str, devices: int, args, port: int, report: str = "") -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--role", role, "--devices", str(devices), "--port",
           str(port), "--report", report]  # fmt: skip
    if args.fake:
        cmd.append("--fake")
    if args.before:
        cmd += ["--before", args.before]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def start_smi() -> subprocess.Popen | None:
    if shutil.which("nvidia-smi") is None:
        return None
    return subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits",
                             "-l", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip


def measure(args) -> dict:
    port = args.port or free_port()
    tmp = tempfile.mkdtemp(prefix="agent-process-")
    report = str(Path(tmp) / "sink.json")
    sink = start_role("sink", 1, args, port, report)
    for _ in range(100):
        if Path(report).exists():
            break
        time.sleep(0.05)
    # One console per device count: the multiplied devices share GPU 0's UUID for the
    # first device, and one console refuses a GPU that another host already reported.
    consoles = {d: Console(str(Path(tmp) / f"console-{d}"), [d]) for d in args.device_counts} \
        if "agent-console" in args.tools else {}
    procs: dict[tuple[str, int], subprocess.Popen] = {}
    skipped: dict[tuple[str, int], str] = {}
    for devices in args.device_counts:
        for tool in args.tools:
            if tool == "agent-console":
                p = start_role(tool, devices, args, consoles[devices].port, consoles[devices].tokens[devices])
            elif tool == "nvidia-smi":
                if devices != 1 or args.fake:
                    continue
                p = start_smi()
                if p is None:
                    skipped[(tool, devices)] = "nvidia-smi is not on the PATH"
                    continue
            else:
                p = start_role(tool, devices, args, port)
            procs[(tool, devices)] = p
    time.sleep(args.warmup)
    first = {}
    for key, p in procs.items():
        if p.poll() is not None:
            skipped[key] = f"exited ({p.returncode}): " + (p.stderr.read().strip().splitlines() or ["?"])[-1]
            continue
        first[key] = snapshot(p.pid)
    time.sleep(args.seconds)
    rows = []
    for key, start in first.items():
        p = procs[key]
        if p.poll() is not None:
            skipped[key] = f"exited ({p.returncode}) during the window"
            continue
        end, mem = snapshot(p.pid), memory_mib(p.pid)
        tool, devices = key
        wall = end["wall"] - start["wall"]
        samples = devices * wall  # one read of each device a second
        cpu_s = (end["ns"] - start["ns"]) / 1e9 if start["ns"] is not None else None
        ticks = end["ticks_s"] - start["ticks_s"]
        best = cpu_s if cpu_s is not None else ticks
        rows.append({"tool": tool, "devices": devices, "window_s": round(wall, 2),
                     "cpu_s": best, "cpu_ticks_s": ticks,
                     "cpu_us_per_sample": best / samples * 1e6,
                     "core_pct": best / wall * 100, "rss_mib": mem.get("VmRSS"),
                     "peak_rss_mib": mem.get("VmHWM"), "rss_anon_mib": mem.get("RssAnon"),
                     "rss_file_mib": mem.get("RssFile"), "rss_shmem_mib": mem.get("RssShmem")})  # fmt: skip
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for key, p in procs.items():
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
        err = p.stderr.read().strip()
        if err and key[0].startswith("agent"):
            rows_err = err.splitlines()[-3:]
            skipped.setdefault(("agent log", key[1]), " / ".join(rows_err))
    sink.send_signal(signal.SIGTERM)
    sink.wait(10)
    sink_end = json.loads(Path(report).read_text()) if Path(report).exists() else {}
    console_end = {}
    for console in consoles.values():
        console.stop()
        console_end.setdefault("stored_samples", {}).update(console.stored())
    shutil.rmtree(tmp, ignore_errors=True)
    return {"rows": rows, "skipped": {f"{t} ×{d}": why for (t, d), why in skipped.items()},
            "sink": sink_end, "console": console_end,
            "seconds": args.seconds, "warmup": args.warmup, "fake": args.fake}  # fmt: skip


def table(result: dict) -> str:
    rows = result["rows"]
    nvitop = {r["devices"]: r for r in rows if r["tool"] == "nvitop"}
    out = ["| tool | devices | window s | CPU µs / GPU-sample | % of a core | RSS MiB | peak RSS MiB "
           "| × nvitop |", "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in sorted(rows, key=lambda r: (r["devices"], TOOLS.index(r["tool"]))):
        peer = nvitop.get(r["devices"])
        x = f"{r['cpu_us_per_sample'] / peer['cpu_us_per_sample']:.2f}" if peer else "—"
        out.append(f"| {r['tool']} | {r['devices']} | {r['window_s']:.0f} | "
                   f"{r['cpu_us_per_sample']:,.0f} | {r['core_pct']:.3f} | {r['rss_mib']:.1f} | "
                   f"{r['peak_rss_mib']:.1f} | {x} |")  # fmt: skip
    for what, why in result["skipped"].items():
        out.append(f"| {what} | | | | | | | {why} |")
    return "\n".join(out)


def goals(result: dict) -> list[str]:
    lines = []
    by = {(r["tool"], r["devices"]): r for r in result["rows"]}
    for devices in sorted({r["devices"] for r in result["rows"]}):
        agent, nvitop = by.get(("agent", devices)), by.get(("nvitop", devices))
        for tool in ("agent", "agent-console"):
            mine = by.get((tool, devices))
            if mine and nvitop:
                x = mine["cpu_us_per_sample"] / nvitop["cpu_us_per_sample"]
                met = "x" if x <= GOAL_NVITOP_X else " "
                lines.append(f"- [{met}] {devices} device(s): {tool} ≤ {GOAL_NVITOP_X:g}× nvitop: {x:.2f}×")
        if agent:
            met = "x" if agent["peak_rss_mib"] <= GOAL_RSS_MIB else " "
            lines.append(f"- [{met}] {devices} device(s): agent peak RSS ≤ {GOAL_RSS_MIB:g} MiB: "
                         f"{agent['peak_rss_mib']:.1f} MiB")  # fmt: skip
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=120.0, help="measured window (default 120)")
    p.add_argument("--warmup", type=float, default=10.0, help="before the window (default 10)")
    p.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset")
    p.add_argument("--devices", default="1,8",
                   help="device counts to run, comma-separated (default 1,8)")  # fmt: skip
    p.add_argument("--fake", action="store_true", help="pynvml stand-in instead of a GPU")
    p.add_argument("--before", default="",
                   help="repo root of another version of the agent, measured as agent-before")  # fmt: skip
    p.add_argument("--port", type=int, default=0, help="the sink's port (default: a free one)")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--role", choices=sorted(ROLES), help=argparse.SUPPRESS)
    p.add_argument("--report", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role:
        args.devices = int(args.devices)
        ROLES[args.role](args)
        return 0
    args.tools = [t for t in args.tools.split(",") if t and (t != "agent-before" or args.before)]
    unknown = set(args.tools) - set(TOOLS)
    if unknown:
        p.error(f"unknown tools: {', '.join(sorted(unknown))} (known: {', '.join(TOOLS)})")
    args.device_counts = [int(d) for d in args.devices.split(",")]
    result = measure(args)
    print(table(result))
    print()
    print("\n".join(goals(result)))
    print(f"\nsink: {json.dumps(result['sink'])}")
    if result["console"]:
        print(f"console: {json.dumps(result['console'])}")
    for r in result["rows"]:
        print(f"{r['tool']} ×{r['devices']}: RSS anon {r['rss_anon_mib']} MiB, file {r['rss_file_mib']} MiB, "
              f"shmem {r['rss_shmem_mib']} MiB")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
