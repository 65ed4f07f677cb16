"""The sign-in page is throttled like the API (django-axes): per username and per client
address, the address taken as the audit log takes it (TRUSTED_PROXY_COUNT)."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from audit.refusals import flush_refusals

pytestmark = pytest.mark.django_db
LIMIT = settings.AXES_FAILURE_LIMIT


def sign_in(username, password, ip="192.0.2.10", forwarded=None):
    headers = {"REMOTE_ADDR": ip}
    if forwarded:
        headers["HTTP_X_FORWARDED_FOR"] = forwarded
    return Client().post("/login/", {"username": username, "password": password}, **headers)


def test_wrong_passwords_lock_the_username_even_for_the_right_one(bob):
    for i in range(LIMIT - 1):
        assert sign_in("bob", "wrong", ip=f"192.0.2.{i + 1}").status_code == 200
    assert sign_in("bob", "wrong", ip="192.0.2.100").status_code == 429  # the limit-th failure
    response = sign_in("bob", "demo-password", ip="192.0.2.200")
    assert response.status_code == 429
    assert b"Too many failed sign-ins" in response.content
    assert "_auth_user_id" not in response.client.session


def test_one_address_guessing_many_usernames_is_locked(bob, alice):
    for i in range(LIMIT):
        sign_in(f"nobody{i}", "wrong")
    assert sign_in("alice", "demo-password").status_code == 429
    assert sign_in("alice", "demo-password", ip="192.0.2.99").status_code == 302  # another client


def test_a_right_password_before_the_limit_signs_in_and_resets(bob):
    for _ in range(LIMIT - 1):
        sign_in("bob", "wrong")
    assert sign_in("bob", "demo-password").status_code == 302
    for _ in range(LIMIT - 1):
        sign_in("bob", "wrong")
    assert sign_in("bob", "demo-password").status_code == 302


def test_a_client_header_alone_does_not_change_the_address(bob, settings):
    settings.TRUSTED_PROXY_COUNT = 0
    for i in range(LIMIT):
        sign_in(f"nobody{i}", "wrong", forwarded=f"198.51.100.{i}")
    assert sign_in("bob", "demo-password", forwarded="198.51.100.250").status_code == 429


def test_behind_a_trusted_proxy_each_client_counts_apart(bob, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    for i in range(LIMIT):
        sign_in(f"nobody{i}", "wrong", ip="10.0.0.1", forwarded="198.51.100.1")
    assert sign_in("bob", "demo-password", ip="10.0.0.1", forwarded="198.51.100.1").status_code == 429
    assert sign_in("bob", "demo-password", ip="10.0.0.1", forwarded="198.51.100.2").status_code == 302


def test_the_lockout_is_audited_once_per_source_and_minute(bob):
    for _ in range(LIMIT + 20):
        sign_in("bob", "wrong")
    failed = AuditEvent.objects.filter(action="auth.login_failed").count()
    assert failed == LIMIT - 1  # then the lockout counts instead of a row per attempt
    flush_refusals(now=timezone.now() + timedelta(minutes=2))
    locked = list(AuditEvent.objects.filter(action="auth.locked_out"))
    assert sum(e.details["count"] for e in locked) == 21 and len(locked) <= 2  # from the limit-th on
    assert {(e.source_ip, e.details["username"], e.outcome) for e in locked} == {("192.0.2.10", "bob", "denied")}


def test_the_api_token_endpoint_counts_too(bob):
    for i in range(LIMIT):
        sign_in("bob", "wrong", ip=f"192.0.2.{i + 1}")
    response = Client().post("/api/v1/auth/token/", {"username": "bob", "password": "demo-password", "name": "x"},
                             REMOTE_ADDR="192.0.2.150", content_type="application/json")
    assert response.status_code == 429
    assert response.json()["code"] == "locked_out"
