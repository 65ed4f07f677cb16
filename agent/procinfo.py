"""Who a GPU process is: name, user, command line and container, read from /proc for
the PIDs NVML reports, and the precision it declares (GPUCONSOLE_PRECISION in its
environment). Linux only; a PID this agent cannot see (another PID namespace, gone
already, another user's environment) gets no description, never a guess."""

from __future__ import annotations

import pwd
import re
import time
from pathlib import Path

from .protocol import PRECISION_ENV, PRECISIONS

PROC = Path("/proc")
ENVIRON_LIMIT = 256 * 1024  # bytes of a process's environment read at most
LIMITS = {"name": 64, "user": 64, "cmd": 256, "cgroup": 256}
CACHE_S = 10.0
_CONTAINER = re.compile(r"([0-9a-f]{64})")


def _read(path: Path, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _user(status: str | None) -> str | None:
    for line in (status or "").splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
            try:
                return pwd.getpwuid(uid).pw_name
            except KeyError:
                return str(uid)
    return None


def _cgroup(text: str | None) -> str | None:
    """The container id when the cgroup path holds one (Docker, containerd, CRI-O),
    else the cgroup path itself."""
    paths = [line.split(":", 2)[2] for line in (text or "").splitlines() if line.count(":") >= 2]
    path = next((p for p in paths if p not in ("", "/")), None)
    if path is None:
        return None
    match = _CONTAINER.search(path)
    return match.group(1)[:12] if match else path


def declared_precision(environ: bytes | None) -> str | None:
    """The precision a process declares in its environment (one of PRECISIONS, any
    case), else None: a missing, empty or unknown value declares nothing."""
    prefix = PRECISION_ENV.encode() + b"="
    for entry in (environ or b"").split(b"\0"):
        if entry.startswith(prefix):
            value = entry[len(prefix):].decode("ascii", "replace").strip().lower()
            return value if value in PRECISIONS else None
    return None


def _environ(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(ENVIRON_LIMIT)
    except OSError:
        return None


def describe(pid: int, root: Path = PROC) -> dict:
    """{"name", "user", "cmd", "cgroup", "precision"} of what can be read for ``pid``
    (may be empty)."""
    base = root / str(pid)
    out = {}
    comm = _read(base / "comm")
    if comm is None:
        return out
    out["name"] = comm.strip()
    cmdline = _read(base / "cmdline")
    if cmdline:
        out["cmd"] = " ".join(part for part in cmdline.split("\0") if part)
    user = _user(_read(base / "status"))
    if user:
        out["user"] = user
    cgroup = _cgroup(_read(base / "cgroup"))
    if cgroup:
        out["cgroup"] = cgroup
    out = {k: v[: LIMITS[k]] for k, v in out.items() if v}
    precision = declared_precision(_environ(base / "environ"))
    if precision:
        out["precision"] = precision
    return out


class ProcessNames:
    """``describe`` with a short cache per PID: processes stay for minutes, readings
    come every second."""

    def __init__(self, root: Path = PROC, ttl: float = CACHE_S):
        self.root, self.ttl = root, ttl
        self._cache: dict[int, tuple[float, dict]] = {}

    def __call__(self, pid: int) -> dict:
        now = time.monotonic()
        hit = self._cache.get(pid)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        info = describe(pid, self.root)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[pid] = (now, info)
        return info
