"""manage.py refuses an argument that is not UTF-8 text (the shell's bytes arrive as lone
surrogates, which no query or file can take) before any command runs."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_argument_that_is_not_utf8_is_refused_before_any_command_runs(tmp_path):
    env = os.environ | {"GPUCONSOLE_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": ""}
    for argv in (["reset_two_factor", b"\xff"], ["backtest_commitment", "--team", b"caf\xe9"]):
        done = subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=env, capture_output=True, text=True)
        position = next(i for i, a in enumerate(argv, 1) if isinstance(a, bytes))
        assert (done.returncode, done.stderr.strip()) == (1, f"manage.py: argument {position} is not UTF-8 text")
