"""The ASGI entry point moves the objects of startup (all of Django and the apps) out
of the cyclic collector's reach: a full collection then walks only what was made
since, instead of stalling the event loop for 85-167 ms every few seconds under the
live fan-out (docs/benchmarks.md, "Sample-to-browser latency")."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_asgi_application_freezes_what_startup_made():
    code = "import gc, gpuconsole.asgi; print(gc.get_freeze_count())"
    env = os.environ | {"INPROCESS_SCHEDULER": "false"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout.split()[-1]) > 50_000
