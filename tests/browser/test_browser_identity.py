"""Identity in a real browser: a team admin invites, promotes and removes a member; a
user enrols a second factor from the account page and signs in with it; scoped API
tokens and host-token rotation on their pages."""

import base64
import re
import subprocess
import sys
import time

import pytest
from conftest import ROOT

pytestmark = pytest.mark.browser

STRONG = "Tall-ships-sail-north-7"


def invite_link(console, email: str) -> str:
    for _ in range(50):
        text = (console.logs / "daphne.log").read_text(errors="replace")
        found = [m for m in re.findall(r"http://\S+/invite/gpi_[\w-]+/", text)]
        if found and email in text:
            return found[-1]
        time.sleep(0.1)
    raise AssertionError(f"no invitation mail for {email} in the server's output")


def totp(secret: str, ahead: int = 0) -> str:
    from django_otp.oath import TOTP

    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    otp = TOTP(key)
    otp.time = time.time() + 30 * ahead
    return f"{otp.token():06d}"


def test_a_team_admin_invites_promotes_and_removes_a_member(login, console, chromium, screenshot):
    admin = login("alice")
    admin.click("nav >> text=Team")
    admin.select_option("#id_team", label="Acme")
    admin.fill("#id_email", "dana@example.com")
    admin.select_option("#id_role", "member")
    admin.click("text=Send invitation")
    assert "Invitation sent to dana@example.com" in admin.content()

    invited = chromium.new_context().new_page()
    invited.goto(invite_link(console, "dana@example.com"))
    screenshot(invited, "identity-invitation")
    invited.fill("#id_username", "dana")
    invited.fill("#id_password1", "password")
    invited.fill("#id_password2", "password")
    invited.click("text=Create account and join")
    assert "too common" in invited.content()
    invited.fill("#id_password1", STRONG)
    invited.fill("#id_password2", STRONG)
    invited.click("text=Create account and join")
    invited.wait_for_url(re.compile(r"/$"))
    assert "Welcome to Acme" in invited.content()

    admin.goto(console.base + "/team/")
    row = admin.locator("table[data-team=acme] tr[data-user=dana]")
    row.locator("select").select_option("admin")
    row.locator("text=Change").click()
    assert "dana is now admin of Acme" in admin.content()
    screenshot(admin, "identity-team")
    admin.locator("table[data-team=acme] tr[data-user=dana] >> text=Remove").click()
    assert "dana left Acme" in admin.content()
    assert admin.locator("table[data-team=acme] tr[data-user=dana]").count() == 0

    invited.goto(console.base + "/")
    assert "/login/" in invited.url  # her session ended with the membership
    actions = {e["action"] for e in console.api("/api/v1/audit/events/?action=member.*")["results"]}
    assert {"member.invite", "member.accept_invite", "member.change_role", "member.remove"} <= actions


def test_two_factor_enrolment_and_sign_in(console, chromium, screenshot):
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-v0", "-c",
         f"from django.contrib.auth.models import User; User.objects.create_user('erin', 'erin@example.com', {STRONG!r})"],
        cwd=ROOT, env=console.env, check=True, timeout=60,
    )
    page = chromium.new_context(viewport={"width": 1200, "height": 900}).new_page()
    page.goto(console.base + "/login/")
    page.fill("input[name=username]", "erin")
    page.fill("input[name=password]", STRONG)
    page.click("button[type=submit]")
    page.goto(console.base + "/account/")
    screenshot(page, "identity-account")
    page.click("text=Set up two-factor sign-in")
    assert page.locator("#totp-qr svg").count() == 1
    screenshot(page, "identity-enrol")
    secret = page.inner_text("#totp-secret").strip()
    page.fill("#id_code", totp(secret))
    page.click("button:has-text('Confirm')")
    assert page.locator("#recovery-codes li").count() == 10, page.inner_text("main")
    screenshot(page, "identity-recovery-codes")

    page.context.clear_cookies()
    page.goto(console.base + "/login/")
    page.fill("input[name=username]", "erin")
    page.fill("input[name=password]", STRONG)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/login/verify/$"))
    page.fill("#id_code", "000000")
    page.click("button:has-text('Verify')")
    assert "Wrong or already used code" in page.content()
    screenshot(page, "identity-verify")
    time.sleep(1.1)  # django-otp's back-off after a wrong code
    page.fill("#id_code", totp(secret, ahead=1))
    page.click("button:has-text('Verify')")
    page.wait_for_url(re.compile(r"/$"))


def test_scoped_tokens_page(login, screenshot):
    page = login("audrey")
    page.goto(page.url.rstrip("/") + "/account/tokens/")
    page.fill("#id_name", "quarterly-audit")
    page.check("input[name=scopes][value=read]")
    page.check("input[name=scopes][value='audit:export']")
    page.fill("#id_days", "30")
    page.check("input[name=teams] >> nth=0")
    page.click("button:has-text('Create token')")
    assert page.locator("#new-token").inner_text().startswith("gpc_")
    screenshot(page, "identity-tokens")


def test_host_token_rotation_page(login, console, screenshot):
    page = login("ops")
    hosts = console.api("/api/v1/hosts/?page_size=500")["results"]
    host = next(h for h in hosts if h["name"] == "use1-h200-replay")
    page.goto(f"{console.base}/hosts/{host['id']}/tokens/")
    page.locator("#host-tokens >> text=Rotate").first.click()
    assert "keeps working until" in page.content()
    screenshot(page, "identity-host-token-rotation")
