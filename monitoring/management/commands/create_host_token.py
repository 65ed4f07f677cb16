"""python manage.py create_host_token HOST [--region R] [--name N]"""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from console.validators import plain_name
from instances.models import Host
from monitoring import services
from monitoring.models import HostToken


class Command(BaseCommand):
    help = (
        "Create an agent token for HOST (registering the host first if it is new) and print it "
        "once, as the last word of the output. Only its hash is kept."
    )

    def add_arguments(self, parser):
        parser.add_argument("host", help="host name, e.g. use1-h100-07")
        parser.add_argument("--region", help="region of a new host (default: the first region)")
        parser.add_argument("--name", default="", help="a label for the token, e.g. 'agent 2026-12'")

    def handle(self, *args, host, region, name, **options):
        if not 1 <= len(host) <= Host._meta.get_field("name").max_length:
            raise CommandError("HOST must be 1 to 63 characters")
        try:
            plain_name(host)
        except ValidationError as exc:
            raise CommandError(f"HOST {host!r}: {exc.messages[0]}") from None
        try:
            with transaction.atomic():
                found, created = services.ensure_host(actor="cli", name=host, region=region)
                token, raw = services.create_host_token(actor="cli", host=found, name=name)
        except services.TokenError as exc:
            raise CommandError(str(exc)) from None
        except ValidationError as exc:
            raise CommandError(f"--name: {' '.join(exc.messages)}") from None
        if created:
            self.stdout.write(f"Registered host {found.name} in {found.region.name}.")
        live = HostToken.objects.live().filter(host=found).count()
        self.stdout.write(
            f"Token {token.prefix}… for {found.name} ({live} live). It is shown only now; "
            f"give it to the agent with --token-file or GPUCONSOLE_AGENT_TOKEN:"
        )
        self.stdout.write(raw)
