"""Run the test identity provider: migrate a fresh database, make its signing key, users
and the console's client, listen on a free port of 127.0.0.1 and print "READY <port>".

Environment: IDP_DB (SQLite path), IDP_USERS (JSON list of {username, email, verified,
groups}), IDP_CLIENT_ID, IDP_CLIENT_SECRET, IDP_REDIRECT_URI."""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "idp.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from oidc_provider.models import Client, ResponseType  # noqa: E402


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def main() -> None:
    call_command("migrate", verbosity=0)
    call_command("creatersakey", stdout=open(os.devnull, "w"))
    for user in json.loads(os.environ["IDP_USERS"]):
        User.objects.create_user(user["username"], user["email"], "idp-password")
    client = Client.objects.create(
        name="GPU Console", client_type="confidential", client_id=os.environ["IDP_CLIENT_ID"],
        client_secret=os.environ["IDP_CLIENT_SECRET"], jwt_alg="RS256", require_consent=False,
        _redirect_uris=os.environ["IDP_REDIRECT_URI"], _scope="openid email profile groups",
    )
    client.response_types.add(ResponseType.objects.get(value="code"))
    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler)
    server.set_app(get_wsgi_application())
    port = server.server_address[1]
    settings.SITE_URL = f"http://127.0.0.1:{port}"
    print(f"READY {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
