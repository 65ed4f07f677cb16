"""python manage.py audit_db_roles APP_ROLE [--owner OWNER_ROLE]

Prints the GRANT/REVOKE statements that give the app's database role what it needs and
no more on the audit tables (run them as the owner role after each migrate, e.g.
``python manage.py audit_db_roles gpuconsole_app | psql "$OWNER_DATABASE_URL"``)."""

from django.core.management.base import BaseCommand, CommandError

from audit.roles import grant_statements


class Command(BaseCommand):
    help = "Print the grants for the app's database role (PostgreSQL)."

    def add_arguments(self, parser):
        parser.add_argument("app_role")
        parser.add_argument("--owner", help="the role that owns the tables and runs migrations")

    def handle(self, *args, app_role, owner=None, **options):
        try:
            statements = grant_statements(app_role, owner)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        for statement in statements:
            self.stdout.write(statement + ";")
