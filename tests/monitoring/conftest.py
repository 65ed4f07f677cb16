"""Telemetry fixtures: host tokens, agents, the recorded trace."""

import json

import pytest
from telemetry_wire import TRACE, Agent

from monitoring import services


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The shared user fixtures hash a password; PBKDF2 would dominate these tests' time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def tokens(ops, fleet):
    """{host name: raw host token} for every host of the fleet."""
    return {
        host.name: services.create_host_token(actor=ops, host=host)[1] for host in fleet["hosts"].values()
    }


@pytest.fixture
def agent():
    return Agent


@pytest.fixture
def trace_lines():
    if not TRACE.exists():
        pytest.skip(f"recorded trace not found at {TRACE}")
    lines = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    return lines[0], lines[1:]


