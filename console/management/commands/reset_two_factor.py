"""python manage.py reset_two_factor USERNAME"""

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from console import twofactor


class Command(BaseCommand):
    help = (
        "Remove USERNAME's authenticator and recovery codes and end their sessions (audited); "
        "they enrol again at the next sign-in. For an operator locked out of the console: "
        "others use the Team page's Reset two-factor."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username, **options):
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        twofactor.reset(actor="cli", user=user)
        self.stdout.write(f"Two-factor sign-in of {user.username} reset; they enrol again at the next sign-in.")
