"""Start the test identity provider (tests/console/idp) in its own process."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import requests

IDP_DIR = Path(__file__).parent / "idp"
CLIENT_ID = "gpu-console"
CLIENT_SECRET = "console-secret-for-tests-0123456789"


@dataclass
class Provider:
    url: str
    process: subprocess.Popen

    @property
    def issuer(self) -> str:
        return f"{self.url}/openid"

    def sign_in(self, username: str) -> requests.Session:
        """A browser signed in at the provider."""
        browser = requests.Session()
        login = f"{self.url}/accounts/login/"
        browser.get(login, timeout=10)
        response = browser.post(
            login, data={"username": username, "password": "idp-password", "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
            allow_redirects=False, timeout=10,
        )
        assert response.status_code == 302, response.text[:300]
        return browser

    def authorize(self, browser: requests.Session, url: str) -> str:
        """Follow the console's redirect to the provider; returns the path of the
        provider's redirect back to the console (its callback, with code and state)."""
        response = browser.get(url, allow_redirects=False, timeout=10)
        assert response.status_code == 302, response.text[:300]
        back = urlsplit(response.headers["Location"])
        return f"{back.path}?{back.query}"


def start(tmp_dir: Path, users: list[dict]) -> Provider:
    env = os.environ | {
        "IDP_DB": str(tmp_dir / "idp.sqlite3"),
        "IDP_USERS": json.dumps(users),
        "IDP_CLIENT_ID": CLIENT_ID,
        "IDP_CLIENT_SECRET": CLIENT_SECRET,
        "IDP_REDIRECT_URI": "http://testserver/oidc/callback/",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    process = subprocess.Popen(
        [sys.executable, str(IDP_DIR / "serve.py")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = process.stdout.readline()
    if not line.startswith("READY "):
        process.kill()
        raise RuntimeError(f"the identity provider did not start: {line}{process.stderr.read()[-2000:]}")
    return Provider(url=f"http://127.0.0.1:{int(line.split()[1])}", process=process)


def stop(provider: Provider) -> None:
    provider.process.terminate()
    try:
        provider.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        provider.process.kill()
