"""Alert fixtures: readings to feed the rules with, and the recorded trace."""

import json
import sys
from pathlib import Path

import pytest

# Readings are written with the telemetry tests' helpers (telemetry_wire).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monitoring"))

from telemetry_wire import TRACE  # noqa: E402


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The shared user fixtures hash a password; PBKDF2 would dominate these tests' time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def trace_lines():
    if not TRACE.exists():
        pytest.skip(f"recorded trace not found at {TRACE}")
    lines = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    return lines[0], lines[1:]
