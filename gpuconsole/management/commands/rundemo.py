"""python manage.py rundemo — serve the console and start the demo's agents."""

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gpuconsole import demo
from monitoring.demo import agent_commands


class Command(BaseCommand):
    help = ("Serve the console with daphne on 127.0.0.1 and run the demo agents until Ctrl-C "
            "(with REDIS_URL, also a Celery worker and beat).")

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--bind", default="127.0.0.1")
        parser.add_argument("--no-agents", action="store_true", help="serve only; start no demo agents")

    def handle(self, *args, port, bind, no_agents, **options):
        if not 1 <= port <= 65535:
            raise CommandError(f"--port {port} is not a TCP port (1-65535)")
        base = f"http://{bind}:{port}"
        # The children get a process group of their own: a terminal's Ctrl-C (or hang-up)
        # reaches this process alone, which stops them in order and waits for them.
        started = []

        def start(cmd, **kwargs):
            started.append(subprocess.Popen(cmd, process_group=0, **kwargs))
            return started[-1]

        # Stopped by SIGTERM (kill, a service manager) as by Ctrl-C or a hang-up. A signal
        # this process was started ignoring (nohup; `&` in a script) stays ignored.
        for signum in STOP_SIGNALS:
            if signum == signal.SIGTERM or signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, _interrupt)
        try:
            server = start(
                [
                    sys.executable, "-m", "daphne", "-b", bind, "-p", str(port),
                    # the agent protocol's frame limit (docs/agent-protocol.md)
                    "--websocket-max-message-size", str(512 * 1024),
                    "--access-log", str(settings.VAR_DIR / "access.log"),
                    "gpuconsole.asgi:application",
                ],
                # the demo's spot prices come from the simulated market (off by default)
                env={"SPOT_MARKET_SIMULATION": "true", **os.environ},
            )
            if settings.REDIS_URL:
                # With Redis, tasks and periodic work (rollups, audit checkpoints) need a
                # Celery worker and beat, as in production.
                celery = [sys.executable, "-m", "celery", "-A", "gpuconsole"]
                start([*celery, "worker", "--loglevel", "WARNING", "--concurrency", "2"])
                start([*celery, "beat", "--loglevel", "WARNING"])
            if not _wait_for(base + "/healthz", server):
                raise CommandError(f"the console did not start on {base}")
            if not no_agents:
                for cmd in agent_commands(base):
                    start(cmd)
            self.stdout.write(self.style.SUCCESS(f"\nGPU Console is running at {base}/"))
            self.stdout.write("Log in as one of (password 'demo'):")
            for username, what in demo.LOGINS:
                self.stdout.write(f"  {username:8} {what}")
            self.stdout.write("Press Ctrl-C to stop.")
            server.wait()
        except KeyboardInterrupt:
            pass
        finally:
            # A second Ctrl-C while stopping does not leave children behind.
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
            self._stop(started)

    def _stop(self, children: list[subprocess.Popen]) -> None:
        """SIGTERM to each child (agents first, the server last), then wait for them all
        together; one still running after STOP_GRACE_S is killed."""
        for child in reversed(children):
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{_name(child)} did not stop within {STOP_GRACE_S:.0f} s; killed")
                child.kill()
                child.wait()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_S = 10.0


def _name(child: subprocess.Popen) -> str:
    args = [str(a) for a in child.args]
    name = args[args.index("-m") + 1] if "-m" in args[:-1] else args[0]
    return f"{name} (pid {child.pid})"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _wait_for(url: str, server, timeout: float = 30.0) -> bool:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(0.3)
    return False
