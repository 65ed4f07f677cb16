"""A host's diagnostics bundle and the GPU health facts, read by the agent.

``collect`` writes one tar.gz: ``manifest.json`` first (every item with its status, size
and SHA-256; a tool this host lacks is ``missing``, never a failure), then what could be
read: ``nvidia-smi -q -x``, ``nvidia-debugdump --list`` (and a dump where the tool
exists), the NVML facts of every GPU, driver/CUDA/kernel versions, kernel messages that
mention NVRM or Xid (where readable) and the tail of the agent's own log. Each item is
capped (``MAX_ITEM_BYTES``) and the bundle as a whole (``MAX_BUNDLE_BYTES``); what was
cut is marked ``truncated``.

The console asks for a bundle with a server frame ``{"type": "diagnostics", "id", "key",
"upload"}``; the agent collects off its event loop and uploads the file over HTTPS to
``upload`` with its host token and the one-time key (docs/operations.md).

Run by hand: ``python -m agent.diagnostics --out bundle.tar.gz``.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import logging
import os
import platform
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request

from . import __version__
from .protocol import DiagnosticsRequest

log = logging.getLogger("gpuconsole.agent")

MAX_ITEM_BYTES = 16 * 1024 * 1024
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
TOOL_TIMEOUT_S = 60.0
NVLINK_MAX_LINKS = 18
KERNEL_WORDS = ("NVRM", "Xid", "nvidia")
LOG_TAIL_LINES = 1000


class LogTail(logging.Handler):
    """The agent's last log lines, kept in memory for a bundle."""

    def __init__(self, lines: int = LOG_TAIL_LINES):
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=lines)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a log line that cannot be formatted is not worth an error
            pass

    def install(self) -> LogTail:
        logger = logging.getLogger("gpuconsole.agent")
        if self not in logger.handlers:
            logger.addHandler(self)
        return self


LOG_TAIL = LogTail()


# --- NVML facts ---------------------------------------------------------------------


def _try(fn, *args):
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # NotSupported, NoPermission, an older driver: the fact is absent
        return None


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value


# NVML's constants, should a binding lack one: (name, value)
CORRECTED, UNCORRECTED = ("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0), ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
VOLATILE, AGGREGATE = ("NVML_VOLATILE_ECC", 0), ("NVML_AGGREGATE_ECC", 1)


def _call(nv, fn: str, *args):
    """``nv.fn(*args)``, constants given as (name, value) read from ``nv``; None when it fails."""
    args = tuple(getattr(nv, a[0], a[1]) if isinstance(a, tuple) else a for a in args)
    return _try(getattr(nv, fn, None), *args)


def health_facts(nv, handle) -> dict[str, int]:
    """The facts of monitoring/health.py (FACTS) NVML gives for one GPU; a fact the GPU
    does not support is absent, never 0. About 30 cheap NVML calls."""
    facts: dict[str, int] = {}
    for name, kind in (("ecc_corrected_aggregate", CORRECTED), ("ecc_uncorrected_aggregate", UNCORRECTED)):
        value = _call(nv, "nvmlDeviceGetTotalEccErrors", handle, kind, AGGREGATE)
        if value is not None:
            facts[name] = int(value)
    for name, cause in (("retired_sbe", 0), ("retired_dbe", 1)):
        pages = _call(nv, "nvmlDeviceGetRetiredPages", handle, cause)
        if pages is not None:
            facts[name] = len(pages)
    pending = _call(nv, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if pending is not None:
        facts["retired_pending"] = int(bool(pending))
    remap = _call(nv, "nvmlDeviceGetRemappedRows", handle)
    if remap is not None:
        corr, unc, is_pending, failed = remap
        facts.update(remap_correctable=int(corr), remap_uncorrectable=int(unc), remap_pending=int(bool(is_pending)),
                     remap_failed=int(bool(failed)))
    for name, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                     ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                     ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                     ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        value = _call(nv, fn, handle)
        if value is not None:
            facts[name] = int(value)
    links = down = 0
    for link in range(NVLINK_MAX_LINKS):
        state = _call(nv, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue
        links += 1
        down += int(state == 0)
    if links:
        facts.update(nvlink_links=links, nvlink_down=down)
    return facts


def nvml_report(nv) -> dict:
    """Versions and, for every GPU, its identity, health facts and a few readings."""
    out = {"driver": _text(_call(nv, "nvmlSystemGetDriverVersion")),
           "cuda_driver": _call(nv, "nvmlSystemGetCudaDriverVersion_v2") or _call(nv, "nvmlSystemGetCudaDriverVersion"),
           "nvml": _text(_call(nv, "nvmlSystemGetNVMLVersion")), "gpus": []}
    count = _call(nv, "nvmlDeviceGetCount") or 0
    for index in range(count):
        h = _call(nv, "nvmlDeviceGetHandleByIndex", index)
        if h is None:
            out["gpus"].append({"index": index, "error": "no handle (lost?)"})
            continue
        pci = _call(nv, "nvmlDeviceGetPciInfo", h)
        reasons = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons")
                   else "nvmlDeviceGetCurrentClocksThrottleReasons")
        gpu = {
            "index": index, "uuid": _text(_call(nv, "nvmlDeviceGetUUID", h)),
            "name": _text(_call(nv, "nvmlDeviceGetName", h)), "serial": _text(_call(nv, "nvmlDeviceGetSerial", h)),
            "pci_bus_id": _text(pci.busId) if pci is not None else None,
            "vbios": _text(_call(nv, "nvmlDeviceGetVbiosVersion", h)),
            "temp_c": _call(nv, "nvmlDeviceGetTemperature", h, ("NVML_TEMPERATURE_GPU", 0)),
            "power_mw": _call(nv, "nvmlDeviceGetPowerUsage", h),
            "gpu_util": getattr(_call(nv, "nvmlDeviceGetUtilizationRates", h), "gpu", None),
            "clocks_event_reasons": _call(nv, reasons, h),
            "ecc_uncorrected_volatile": _call(nv, "nvmlDeviceGetTotalEccErrors", h, UNCORRECTED, VOLATILE),
            "ecc_corrected_volatile": _call(nv, "nvmlDeviceGetTotalEccErrors", h, CORRECTED, VOLATILE),
            "facts": health_facts(nv, h),
        }
        out["gpus"].append(gpu)
    return out


# --- the bundle -----------------------------------------------------------------------


class Bundle:
    def __init__(self, max_bytes: int = MAX_BUNDLE_BYTES, max_item: int = MAX_ITEM_BYTES):
        self.items: list[dict] = []
        self.files: list[tuple[str, bytes]] = []
        self.left = max_bytes
        self.max_item = max_item

    def add(self, name: str, data: bytes, **info) -> None:
        cap = min(self.max_item, max(0, self.left))
        status = info.pop("status", "ok")
        if len(data) > cap:
            data, status = data[:cap], "truncated"
        self.left -= len(data)
        self.files.append((name, data))
        self.items.append({"name": name, "status": status, "bytes": len(data),
                           "sha256": hashlib.sha256(data).hexdigest(), **info})

    def note(self, name: str, status: str, **info) -> None:
        """An item with nothing to add: ``missing`` (no such tool), ``unreadable``, ``failed``."""
        self.items.append({"name": name, "status": status, **info})

    def run(self, name: str, argv: list[str], timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess | None:
        command = " ".join(argv)
        if shutil.which(argv[0]) is None:
            self.note(name, "missing", command=command, note=f"{argv[0]} is not installed on this host")
            return None
        started = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            self.note(name, "failed", command=command, note=f"no answer within {timeout:.0f} s")
            return None
        except OSError as exc:
            self.note(name, "failed", command=command, note=str(exc))
            return None
        took = round(time.monotonic() - started, 3)
        status = "ok" if done.returncode == 0 else "failed"
        body = done.stdout + (b"\n--- stderr ---\n" + done.stderr if done.stderr else b"")
        self.add(name, body, status=status, command=command, rc=done.returncode, seconds=took)
        return done

    def write(self, path: str, manifest: dict) -> dict:
        manifest = dict(manifest, items=self.items)
        head = json.dumps(manifest, indent=2, sort_keys=True).encode()
        with tarfile.open(path, "w:gz") as tar:
            for name, data in [("manifest.json", head), *self.files]:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
        return manifest


def _kernel_messages(bundle: Bundle) -> None:
    name = "kernel-nvrm.log"
    sources = [["dmesg", "--time-format", "iso"], ["journalctl", "-k", "-b", "--no-pager", "-q"]]
    why = []
    for argv in sources:
        if shutil.which(argv[0]) is None:
            why.append(f"{argv[0]} is not installed")
            continue
        try:
            done = subprocess.run(argv, capture_output=True, timeout=TOOL_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why.append(f"{argv[0]}: {exc}")
            continue
        if done.returncode != 0:
            why.append(f"{' '.join(argv)}: exit {done.returncode} ({done.stderr.decode(errors='replace').strip()[:120]})")
            continue
        lines = [line for line in done.stdout.decode(errors="replace").splitlines()
                 if any(word in line for word in KERNEL_WORDS)]
        bundle.add(name, ("\n".join(lines) + "\n").encode(), command=" ".join(argv), lines=len(lines))
        return
    bundle.note(name, "unreadable", note="; ".join(why))


def _debugdump(bundle: Bundle, workdir: str) -> None:
    listed = bundle.run("nvidia-debugdump-list.txt", ["nvidia-debugdump", "--list"])
    if listed is None or listed.returncode != 0:
        return
    dump = os.path.join(workdir, "debugdump.zip")
    done = bundle.run("nvidia-debugdump.txt", ["nvidia-debugdump", "-D", "-f", dump], timeout=120)
    if done is not None and os.path.exists(dump):
        with open(dump, "rb") as f:
            bundle.add("nvidia-debugdump.zip", f.read(MAX_ITEM_BYTES + 1), command="nvidia-debugdump -D")


def _versions() -> dict:
    out = {"kernel": platform.release(), "os": platform.platform(), "python": platform.python_version()}
    for key, path in (("proc_version", "/proc/version"), ("nvidia_driver", "/proc/driver/nvidia/version")):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                out[key] = f.read(4096).strip()
        except OSError:
            out[key] = None
    return out


def collect(path: str, *, nv=None, log_tail: LogTail | None = None, max_bytes: int = MAX_BUNDLE_BYTES) -> dict:
    """Write the bundle to ``path``; returns its manifest."""
    started = time.time()
    bundle = Bundle(max_bytes=max_bytes)
    bundle.run("nvidia-smi-q.xml", ["nvidia-smi", "-q", "-x"])
    with tempfile.TemporaryDirectory(prefix="gpuconsole-diag-") as workdir:
        _debugdump(bundle, workdir)
    report = _nvml(nv)
    bundle.add("nvml.json", json.dumps(report, indent=2, sort_keys=True, default=str).encode(),
               status="ok" if "error" not in report else "failed")
    versions = _versions()
    versions.update(driver=report.get("driver"), cuda_driver=report.get("cuda_driver"))
    bundle.add("versions.json", json.dumps(versions, indent=2, sort_keys=True).encode())
    _kernel_messages(bundle)
    tail = (log_tail or LOG_TAIL).lines
    bundle.add("agent.log", ("\n".join(tail) + "\n").encode(), lines=len(tail))
    manifest = {"host": socket.gethostname(), "agent": f"gpuconsole-agent/{__version__}", "created": started,
                "seconds": round(time.time() - started, 3), "versions": versions}
    return bundle.write(path, manifest)


def _nvml(nv) -> dict:
    if nv is not None:
        return nvml_report(nv)
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no pynvml: the bundle says so and goes on
        return {"error": f"NVML: {exc}", "gpus": []}
    try:
        return nvml_report(pynvml)
    finally:
        _try(pynvml.nvmlShutdown)


# --- asked by the console ---------------------------------------------------------------


def upload_url(server: str, path: str) -> str:
    """The HTTPS address of ``path`` on the console the agent's websocket ``server`` names."""
    parts = urllib.parse.urlsplit(server)
    scheme = {"wss": "https", "ws": "http"}.get(parts.scheme, parts.scheme)
    return urllib.parse.urlunsplit((scheme, parts.netloc, path, "", ""))


def upload(url: str, token: str, key: str, path: str, timeout: float = 300.0) -> int:
    with open(path, "rb") as f:
        data = f.read()
    request = urllib.request.Request(url, data=data, method="POST", headers={
        "Authorization": f"Bearer {token}", "X-Diagnostics-Key": key, "Content-Type": "application/gzip"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status


def answer(request: DiagnosticsRequest, *, server: str, token: str) -> None:
    """Collect and upload the bundle a "diagnostics" frame asks for (blocking: run it in
    a thread). Failures are logged; the console shows the bundle as never uploaded."""
    path = upload_url(server, request.upload)
    with tempfile.TemporaryDirectory(prefix="gpuconsole-diag-") as workdir:
        out = os.path.join(workdir, "bundle.tar.gz")
        try:
            manifest = collect(out, max_bytes=request.max_bytes or MAX_BUNDLE_BYTES)
            status = upload(path, token, request.key, out)
            log.info("diagnostics %s uploaded (%d items, HTTP %d)", request.id, len(manifest["items"]), status)
        except Exception as exc:
            log.warning("diagnostics %s could not be collected or uploaded: %s", request.id, exc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.diagnostics",
                                     description="Collect this host's diagnostics bundle.")
    parser.add_argument("--out", required=True, help="the .tar.gz to write")
    parser.add_argument("--max-bytes", type=int, default=MAX_BUNDLE_BYTES)
    parser.add_argument("--manifest", help="also write the manifest here (JSON)")
    args = parser.parse_args(argv)
    manifest = collect(args.out, max_bytes=args.max_bytes)
    if args.manifest:
        with open(args.manifest, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
    for item in manifest["items"]:
        print(f"{item['status']:>10}  {item['name']}  {item.get('bytes', '')}  {item.get('note', '')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
