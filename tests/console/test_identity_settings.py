import pytest
from django.core.exceptions import ImproperlyConfigured

from gpuconsole import env


def test_roles_are_read_and_checked(monkeypatch):
    monkeypatch.setenv("REQUIRE_2FA_ROLES", "Operator, admin")
    assert env.envroles("REQUIRE_2FA_ROLES", []) == ["operator", "admin"]
    monkeypatch.setenv("REQUIRE_2FA_ROLES", "none")
    assert env.envroles("REQUIRE_2FA_ROLES", ["admin"]) == []
    monkeypatch.setenv("REQUIRE_2FA_ROLES", "admin,owner")
    with pytest.raises(ImproperlyConfigured, match="owner"):
        env.envroles("REQUIRE_2FA_ROLES", [])


def test_production_requires_a_second_factor_of_privileged_roles():
    from test_settings import run_manage

    code = "from django.conf import settings; print(settings.REQUIRE_2FA_ROLES, settings.SESSION_IDLE_SECONDS)"
    done = run_manage("shell", "-c", code, DEBUG="false", SECRET_KEY="k" * 50)
    assert done.stdout.strip().splitlines()[-1] == "['operator', 'admin', 'auditor'] 1800", done.stderr
    assert run_manage("shell", "-c", code).stdout.strip().splitlines()[-1] == "[] 1800"


def test_sso_needs_its_client(monkeypatch):
    from test_settings import run_manage

    done = run_manage("check", OIDC_ISSUER="https://idp.example.com")
    assert done.returncode != 0 and "OIDC_CLIENT_ID" in done.stderr
