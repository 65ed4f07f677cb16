import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from gpuconsole import env

ROOT = Path(__file__).resolve().parents[2]


def run_manage(*args, **environ):
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY")}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=clean | environ, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("name", "value", "reader"),
    [
        ("DEBUG", "maybe", lambda: env.envbool("DEBUG", True)),
        ("TRUSTED_PROXY_COUNT", "-1", lambda: env.envint("TRUSTED_PROXY_COUNT", 0, minimum=0)),
        ("TRUSTED_PROXY_COUNT", "two", lambda: env.envint("TRUSTED_PROXY_COUNT", 0, minimum=0)),
        ("ALLOWED_HOSTS", " , ", lambda: env.envlist("ALLOWED_HOSTS", [])),
        ("THROTTLE_USER", "fast", lambda: env.envrate("THROTTLE_USER", "1/min")),
        ("REDIS_URL", "http://x", lambda: env.redis_url("REDIS_URL")),
        ("DATABASE_URL", "mysql://x/y", lambda: env.database_from_url("DATABASE_URL", "mysql://x/y")),
    ],
)
def test_a_bad_value_names_the_setting(monkeypatch, name, value, reader):
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        reader()


def test_database_url_is_parsed():
    db = env.database_from_url("DATABASE_URL", "postgres://u:p%40ss@db.example:6543/gpc")
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == ("gpc", "u", "p@ss", "db.example", "6543")


def test_start_up_stops_on_a_bad_value():
    result = run_manage("check", DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr


def test_a_negative_or_fractional_seal_delay_stops_start_up():
    for value, said in (("-5", "must be at least 0"), ("2.5", "is not an integer")):
        result = run_manage("check", AUDIT_SEAL_DELAY_MS=value)
        assert result.returncode != 0 and f"AUDIT_SEAL_DELAY_MS={value!r} {said}" in result.stderr


def test_production_needs_a_secret_key():
    result = run_manage("check", DEBUG="false")
    assert "SECRET_KEY must be set" in result.stderr


def test_deploy_check_is_clean_with_production_settings():
    result = run_manage(
        "check", "--deploy", "--fail-level", "WARNING",
        DEBUG="false", SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS="console.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr
