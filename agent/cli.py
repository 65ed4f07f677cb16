"""``gpuconsole-agent``: command line, validation and start-up.

Every problem a person can fix (a flag, a file, a token, the server's address)
is reported as one line on stderr, never as a traceback.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from . import __version__
from .backends import HostInfo, Source
from .process import EXIT_FAILED, EXIT_REFUSED, trim_memory
from .protocol import HOST_RE

# The event loop, the websocket client and the spool are imported only once NVML is open
# and its start-up memory handed back (start()), so the process's peak stays low.

PROG = "gpuconsole-agent"
TOKEN_ENV = "GPUCONSOLE_AGENT_TOKEN"
TOKEN_RE = re.compile(r"^[\x21-\x7e]{1,4096}$")
DEFAULT_COUNTER_INTERVAL = 60.0
SIMULATED_HOSTS = ("sim", "replay")  # backends whose hosts, firewall included, are simulated
# nvml: GPM costs two calls of tens of microseconds per GPU, so it is read on every tick
# and every reading carries tensor activity; the sim keeps its slower, cheaper set.
DEFAULT_SLOW_INTERVAL = {"nvml": 1.0, "sim": 5.0, "replay": 5.0}

log = logging.getLogger("gpuconsole.agent")


class UsageError(Exception):
    """A flag, file or value the person running the agent has to fix."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = f"{PROG}: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and log.isEnabledFor(logging.DEBUG):
            text += "\n" + self.formatException(record.exc_info)
        return text


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Stream GPU telemetry from this host to GPU Console.",
        epilog=f"The token may also come from the environment variable {TOKEN_ENV}.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument("--server", metavar="URL", help="ws:// or wss:// URL of the agent endpoint")
    p.add_argument("--token", help="host token (prefer --token-file or the environment)")
    p.add_argument("--token-file", metavar="PATH", help="file holding the host token")
    p.add_argument("--backend", choices=("nvml", "replay", "sim"), default="nvml")
    p.add_argument("--trace", metavar="PATH", help="recorded trace for --backend replay")
    p.add_argument("--speed", type=float, default=1.0, help="replay speed factor (default 1)")
    p.add_argument("--once", action="store_true", help="sample once (replay: the whole trace), "
                   "wait until every record is acknowledged, exit")  # fmt: skip
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between fast samples, 0.2-60 (default 1)")  # fmt: skip
    p.add_argument("--slow-interval", type=float, default=None, metavar="S",
                   help="seconds between slow samples (GPM: tensor activity, SM occupancy, DRAM "
                   "bandwidth), 1-600, not shorter than --interval (default: nvml 1, or --interval "
                   "when that is longer; sim 5)")  # fmt: skip
    p.add_argument("--counter-interval", type=float, default=None, metavar="S",
                   help="nvml: seconds between reads of the cumulative counters (energy, PCIe and "
                   "NVLink bytes), 1-3600, not shorter than --interval (default 60)")  # fmt: skip
    p.add_argument("--spool-dir", metavar="DIR",
                   help="where unacknowledged records wait (default ~/.cache/gpuconsole-agent/HOST)")  # fmt: skip
    p.add_argument("--spool-max-records", type=int, default=200_000, metavar="N",
                   help="spool bound; the oldest records are dropped past it (default 200000)")  # fmt: skip
    p.add_argument("--hosts", type=int, metavar="N", help="sim: number of synthetic hosts")
    p.add_argument("--gpus", type=int, metavar="M", help="sim: GPUs per synthetic host")
    p.add_argument("--fleet", metavar="FILE", help="sim: JSON list of hosts, tokens and GPUs")
    p.add_argument("--seed", type=int, default=0, help="sim: random seed (default 0)")
    p.add_argument("--spread", action="store_true",
                   help="sim with several hosts: each host samples at its own moment of the interval "
                   "(host i of n at i/n of it), as separate agents would; default: all at once")  # fmt: skip
    p.add_argument("--follow-allocations", action="store_true",
                   help="sim with --fleet: devices run what the console says they are held for "
                   "(polled every 2 s from the server's /api/v1/agent/allocations/)")  # fmt: skip
    p.add_argument("--host", metavar="NAME",
                   help="host name to report (default: this machine's; sim: prefix of the "
                   "synthetic host names, default sim-host)")  # fmt: skip
    p.add_argument("--retry-auth", action="store_true",
                   help="keep retrying when the server refuses the token")  # fmt: skip
    p.add_argument("--network", action="store_true",
                   help="apply this host's network rules with nftables (needs root); the set in force is kept "
                        "in the spool directory and put back at start, before connecting")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    return p


@dataclass
class Plan:
    source: Source
    hosts: list[HostInfo]
    server: str
    token: str | None
    spool_dirs: dict[str, Path]
    args: argparse.Namespace


def check_server(url: str | None) -> str:
    if not url:
        raise UsageError("--server is required, e.g. --server wss://console.example/ws/agent/")
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        raise UsageError(f"--server must be a ws:// or wss:// URL, not {url!r}")
    try:
        parts.port  # noqa: B018 (validates the port)
    except ValueError:
        raise UsageError(f"--server has a bad port: {url!r}") from None
    if not parts.hostname:
        raise UsageError(f"--server has no host name: {url!r}")
    if "token" in parts.query.lower():
        raise UsageError("never put the token in the URL; use --token-file or " + TOKEN_ENV)
    return url


def is_loopback(hostname: str) -> bool:
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def read_token(args, env) -> str | None:
    if args.token and args.token_file:
        raise UsageError("give either --token or --token-file, not both")
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            raise UsageError(
                f"cannot read token file {args.token_file}: {exc.strerror or exc}"
            ) from None
        if not token:
            raise UsageError(f"token file {args.token_file} is empty")
    else:
        token = args.token or env.get(TOKEN_ENV) or None
    if token is not None and not TOKEN_RE.match(token):
        raise UsageError(
            "the token must be printable ASCII without spaces, at most 4096 characters"
        )
    return token


def check_numbers(args) -> None:
    if not 0.2 <= args.interval <= 60:
        raise UsageError(f"--interval must be between 0.2 and 60 seconds, not {args.interval:g}")
    if args.slow_interval is None:
        args.slow_interval = max(DEFAULT_SLOW_INTERVAL[args.backend], args.interval)
    if not 1 <= args.slow_interval <= 600:
        raise UsageError(
            f"--slow-interval must be between 1 and 600 seconds, not {args.slow_interval:g}"
        )
    if args.slow_interval < args.interval:
        raise UsageError("--slow-interval must not be shorter than --interval")
    if args.counter_interval is None:
        args.counter_interval = max(DEFAULT_COUNTER_INTERVAL, args.interval)
    if not 1 <= args.counter_interval <= 3600:
        raise UsageError(
            f"--counter-interval must be between 1 and 3600 seconds, not {args.counter_interval:g}"
        )
    if args.counter_interval < args.interval:
        raise UsageError("--counter-interval must not be shorter than --interval")
    if not 0 < args.speed <= 1000:
        raise UsageError(f"--speed must be above 0 and at most 1000, not {args.speed:g}")
    if args.spool_max_records < 100:
        raise UsageError("--spool-max-records must be at least 100")
    if args.network and args.backend == "sim":
        raise UsageError("--network applies one real host's rules; it does not go with --backend sim")
    if args.hosts is not None and not 1 <= args.hosts <= 10_000:
        raise UsageError("--hosts must be between 1 and 10000")
    if args.gpus is not None and not 1 <= args.gpus <= 64:
        raise UsageError("--gpus must be between 1 and 64")
    if args.host is not None and not HOST_RE.match(args.host):
        raise UsageError(f"--host {args.host!r} is not a valid host name")


def default_spool_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "gpuconsole-agent"


def spool_dirs(args, hosts: list[HostInfo]) -> dict[str, Path]:
    if args.spool_dir and len(hosts) == 1:
        return {hosts[0].host: Path(args.spool_dir)}
    root = Path(args.spool_dir) if args.spool_dir else default_spool_root()
    return {h.host: root / h.host for h in hosts}


def make_source(args) -> Source:
    host = args.host or socket.gethostname()
    if not HOST_RE.match(host):
        raise UsageError(f"this machine's name {host!r} cannot be used; give --host NAME")
    if args.backend == "replay":
        from .backends.replay import ReplaySource, Trace, TraceError

        if not args.trace:
            raise UsageError("--backend replay needs --trace PATH")
        try:
            trace = Trace.load(args.trace)
        except TraceError as exc:
            raise UsageError(str(exc)) from None
        return ReplaySource(trace, host=host, speed=args.speed, once=args.once)
    if args.backend == "sim":
        return make_sim(args)
    from .backends.nvml import NvmlSource

    source = NvmlSource(
        host=host,
        interval=args.interval,
        slow_interval=args.slow_interval,
        counter_interval=args.counter_interval,
        once=args.once,
    )
    source.open()
    trim_memory()  # what NVML's start-up freed, before the rest of the agent is loaded
    return source


def http_base(server: str) -> str:
    """The console's base URL from the agent endpoint's: ws(s)://h/ws/agent/ -> http(s)://h."""
    scheme, _, rest = server.partition("://")
    base = rest.split("/ws/agent", 1)[0].rstrip("/")
    return ("https" if scheme == "wss" else "http") + "://" + base


def make_sim(args) -> Source:
    from .backends.sim import FleetError, SimSource, load_fleet

    timing = {"interval": args.interval, "slow_interval": args.slow_interval, "once": args.once, "spread": args.spread}
    if args.fleet:
        if args.hosts is not None or args.gpus is not None or args.host:
            raise UsageError("--fleet gives the hosts and GPUs: drop --hosts, --gpus and --host")
        try:
            source = SimSource.from_fleet(load_fleet(args.fleet), seed=args.seed, **timing)
        except FleetError as exc:
            raise UsageError(str(exc)) from None
        if args.follow_allocations:
            source.follow(http_base(args.server))
        return source
    if args.follow_allocations:
        raise UsageError("--follow-allocations needs --fleet (its hosts' tokens read the allocations)")
    return SimSource.synthetic(
        args.hosts or 1, args.gpus or 8, prefix=args.host or "sim-host", seed=args.seed, **timing
    )


def plan(argv: list[str] | None, env=os.environ) -> Plan:
    args = build_parser().parse_args(argv)
    log.setLevel(args.log_level.upper())
    server = check_server(args.server)
    check_numbers(args)
    token = read_token(args, env)
    if token is None and not (args.backend == "sim" and args.fleet):
        raise UsageError(f"no token: give --token-file PATH, --token TOKEN or set {TOKEN_ENV}")
    if args.backend != "replay" and args.trace:
        raise UsageError("--trace is only for --backend replay")
    if args.backend != "sim" and (args.fleet or args.hosts or args.gpus or args.follow_allocations or args.spread):
        raise UsageError("--fleet, --hosts, --gpus and --spread are only for --backend sim")
    if args.spread and args.once:
        raise UsageError("--spread spreads the hosts' samples over each interval; with --once each host samples once")
    source = make_source(args)
    hosts = source.hosts()
    if args.spread and len(hosts) < 2:
        raise UsageError("--spread needs several hosts (--hosts N, or a --fleet of several)")
    if token is None and any(h.token is None for h in hosts):
        raise UsageError(f"no token: give --token-file PATH, --token TOKEN or set {TOKEN_ENV}")
    if not is_loopback(urlsplit(server).hostname) and server.startswith("ws://"):
        log.warning("sending the host token unencrypted over ws://; use wss:// beyond this host")
    return Plan(source, hosts, server, token, spool_dirs(args, hosts), args)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of each record."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def setup_logging() -> None:
    handler = _StderrHandler()
    handler.setFormatter(_Formatter())
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    try:
        the_plan = plan(argv)
    except UsageError as exc:
        print(f"{PROG}: error: {exc} (see --help)", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as exc:  # NVML absent, and the like: one line, not a traceback
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        log.debug("start-up failure", exc_info=True)
        return EXIT_FAILED
    return start(the_plan)


def start(the_plan: Plan) -> int:
    import asyncio

    from .runner import run
    from .spool import Spool, SpoolError
    from .uplink import Backoff, HostLink

    args = the_plan.args
    spools: list[Spool] = []
    try:
        links = {}
        for info in the_plan.hosts:
            spool = Spool(the_plan.spool_dirs[info.host], max_records=args.spool_max_records)
            spools.append(spool)
            links[info.host] = HostLink(
                server=the_plan.server,
                host=info.host,
                token=info.token or the_plan.token,
                gpus=info.gpus,
                backend=the_plan.source.name,
                spool=spool,
                retry_auth=args.retry_auth,
                label=info.host if len(the_plan.hosts) > 1 else "",
                backoff=Backoff(),
                driver=info.driver,
                token_file=None if info.token else args.token_file,
            )
        if args.network:
            _enforce_network(the_plan, links)
        elif the_plan.source.name in SIMULATED_HOSTS:
            _simulate_network(links)
        _announce(the_plan, spools)
        return asyncio.run(run(the_plan.source, links, once=args.once))
    except SpoolError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        the_plan.source.stop()
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    finally:
        for spool in spools:
            spool.close()


def _enforce_network(the_plan: Plan, links: dict) -> None:
    """Put back the rules in force before the restart, then apply what the server sends."""
    from .firewall import Enforcer

    for host, link in links.items():
        link.network = Enforcer(state_path=the_plan.spool_dirs[host] / "network-rules.json")
        restored = link.network.restore()
        if restored is not None:
            log.info("network rules version %d restored", restored.version)


def _simulate_network(links: dict) -> None:
    """A simulated host's firewall: rulesets are checked and rendered, then reported in
    force, so a demo fleet shows its rules applied instead of refused."""
    from .firewall import Enforcer

    for link in links.values():
        link.network = Enforcer(nft=None)


def _announce(the_plan: Plan, spools: list) -> None:
    gpus = sum(len(h.gpus) for h in the_plan.hosts)
    waiting = sum(len(s) for s in spools)
    where = spools[0].directory if len(spools) == 1 else spools[0].directory.parent
    log.info(
        "%s %s: %s backend, %d host(s), %d GPU(s), server %s, spool %s (%d records waiting)",
        PROG,
        __version__,
        the_plan.source.name,
        len(the_plan.hosts),
        gpus,
        the_plan.server,
        where,
        waiting,
    )
